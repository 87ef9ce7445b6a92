"""Persistence of the slot assignment, so a restarted control plane continues it.

`FileSlotStore` keeps it in a JSON file (files mode); the Kubernetes mode keeps it in a
ConfigMap. Unreadable state is reported and rebuilt from sorted order, never a crash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from controlplane.compute.slots import assignment_from_json, assignment_to_json
from controlplane.compute.types import SlotAssignment
from peerplane.durable import atomic_write


class SlotStore(Protocol):
    def load(self) -> tuple[SlotAssignment, list[str]]:
        """The persisted assignment and any problems found reading it."""

    def save(self, assignment: SlotAssignment) -> None:
        """Persist `assignment`; raises OSError (or an API error) when it cannot."""


class MemorySlotStore:
    """No persistence: for `compute` without --state and for tests."""

    def __init__(self, assignment: SlotAssignment | None = None) -> None:
        self.assignment: SlotAssignment = assignment or {}

    def load(self) -> tuple[SlotAssignment, list[str]]:
        return self.assignment, []

    def save(self, assignment: SlotAssignment) -> None:
        self.assignment = assignment


class FileSlotStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> tuple[SlotAssignment, list[str]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}, []
        except OSError as err:
            return {}, [f"{self.path}: {err.strerror}; slots rebuilt from sorted order"]
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as err:
            return {}, [f"{self.path}: not JSON ({err}); slots rebuilt from sorted order"]
        assignment, errors = assignment_from_json(data)
        return assignment, [f"{self.path}: {e}" for e in errors]

    def save(self, assignment: SlotAssignment) -> None:
        text = json.dumps(assignment_to_json(assignment), indent=1, sort_keys=True)
        atomic_write(self.path, text.encode() + b"\n")
