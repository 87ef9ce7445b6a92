"""A render's map files compared by their entries: a joined listener's are persistent
maps (`immutables.Map`, which never equals a dict), a render from scratch's dicts."""

from __future__ import annotations

from collections.abc import Mapping


def entries(maps: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """Each map file's entries as a dict, by path."""
    return {path: dict(found) for path, found in maps.items()}
