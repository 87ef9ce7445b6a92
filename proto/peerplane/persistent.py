"""Persistent maps (`immutables.Map`, a HAMT) for the snapshot's parts held by name: a
change sets its keys on a map that shares every other entry with the last version's,
instead of copying a dict of 10,000 entries. Both sides hold them (the control plane's
route table and grouping, the agent's held route groups)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from immutables import Map

K = TypeVar("K")
V = TypeVar("V")


def persistent(found: Mapping[K, V]) -> Map[K, V]:
    """`found` as a persistent map: itself when it is one, else a map of its entries (a
    version built from scratch holds dicts, each patched one maps)."""
    return found if isinstance(found, Map) else Map(found)
