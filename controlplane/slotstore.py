"""Persistence of the slot assignment, so a restarted control plane continues it.

`FileSlotStore` keeps it in a JSON file (files mode); the Kubernetes mode keeps it in a
ConfigMap. Unreadable state is reported and rebuilt from sorted order, never a crash.
Loading reads the wall clock: old state without freed times counts its free slots as
freed at load.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

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


# Far above any valid state (MAX_SLOTS slots of ~40 bytes for thousands of backends), so
# a runaway file is refused before it is parsed into memory.
MAX_STATE_BYTES = 64 << 20


def parse_state(text: str | bytes) -> tuple[Any, str | None]:
    """JSON of persisted state, or None and why not (never raises: a document nested
    thousands deep makes json raise RecursionError)."""
    if len(text) > MAX_STATE_BYTES:
        return None, f"larger than {MAX_STATE_BYTES >> 20} MiB"
    try:
        return json.loads(text), None
    except (ValueError, UnicodeDecodeError) as err:
        return None, f"not JSON ({err})"
    except RecursionError:
        return None, "not JSON (nested too deeply)"


class FileSlotStore:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock

    def load(self) -> tuple[SlotAssignment, list[str]]:
        try:
            with self.path.open("rb") as f:
                raw = f.read(MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return {}, []
        except OSError as err:
            return {}, [f"{self.path}: {err.strerror}; slots rebuilt from sorted order"]
        data, problem = parse_state(raw)
        if problem is not None:
            return {}, [f"{self.path}: {problem}; slots rebuilt from sorted order"]
        assignment, errors = assignment_from_json(data, self._clock())
        return assignment, [f"{self.path}: {e}" for e in errors]

    def save(self, assignment: SlotAssignment) -> None:
        text = json.dumps(assignment_to_json(assignment), indent=1, sort_keys=True)
        atomic_write(self.path, text.encode() + b"\n")
