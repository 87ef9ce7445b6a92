"""The one protocol of the slot ledger, the in-memory ledger, and what a save writes.

Every ledger persists per backend and writes only the backends a step changed (one row,
one Kubernetes shard): cost follows the change, not the cluster. `changes` finds them by
identity first (the computation keeps an unchanged backend's `BackendSlots` object), so
telling them costs one pointer comparison per backend, and with the computation's
`touched` (`Since`) only the backends it touched are compared.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from controlplane.snapshot import BackendSlots, SlotAssignment


class SlotLedger(Protocol):
    """Where the slot assignment persists. `save` must not return before it is durable:
    snapshots using an assignment are published only after it was saved."""

    def load(self) -> tuple[SlotAssignment, list[str]]:
        """The persisted assignment and any problems found reading it (reported; the
        backends concerned are rebuilt from sorted order). Raises when the ledger cannot be
        read at all, rather than rebuilding: that would move every surviving endpoint."""

    def save(self, assignment: SlotAssignment, since: Since | None = None) -> None:
        """Persist `assignment`, writing only what differs from what is persisted; raises
        LedgerWriteError (or OSError) when it cannot. `since`: (an assignment, the backends
        `assignment` can differ from it in); when that assignment is the one this ledger
        last saved whole (or loaded), only those backends are compared, not every one."""

    def dirty(self) -> bool:
        """Whether the persisted ledger differs from what this ledger last saved (edited,
        deleted, corrupt): the next `save` writes it back even if the assignment is the
        same."""


class LedgerWriteError(Exception):
    """A ledger write that failed. `permanent`: retrying the same write cannot succeed
    (the API refused it as invalid, too large or forbidden; a file that is not writable);
    `cause` is a short stable word for metrics and for logging once per cause.
    `unwritten`: the backends whose write failed while every other one of the save was
    written (a shard each), which the loop may then publish; None when that is not known
    (nothing of the save may be published)."""

    def __init__(
        self,
        message: str,
        *,
        cause: str,
        permanent: bool,
        unwritten: frozenset[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.permanent = permanent
        self.unwritten = unwritten

    def of(self, unwritten: frozenset[str]) -> LedgerWriteError:
        """This error, naming the backends left unwritten by the save it ends."""
        return LedgerWriteError(
            str(self), cause=self.cause, permanent=self.permanent, unwritten=unwritten
        )


@dataclass(frozen=True, slots=True)
class Changes:
    """What a save writes: backends to write (new or changed) and backends to delete."""

    written: dict[str, BackendSlots] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.written or self.deleted)


Since = tuple[SlotAssignment, Collection[str]]
"""`SlotLedger.save`'s hint: the assignment a computation started from and the backends
the new one can differ from it in (`ComputeResult.touched`)."""


def names_to_compare(since: Since | None, last: SlotAssignment | None) -> Collection[str] | None:
    """The backends a save must compare: `since`'s when it starts from `last` (what the
    ledger last saved whole or loaded, so holds as is), else None (all of them)."""
    if since is None or last is None or since[0] is not last:
        return None
    return since[1]


def changes(
    saved: Mapping[str, BackendSlots],
    new: Mapping[str, BackendSlots],
    dirty: frozenset[str] | set[str] = frozenset(),
    names: Collection[str] | None = None,
) -> Changes:
    """Backends of `new` that `saved` lacks or holds differently, plus the `dirty` ones
    still in `new`; backends of `saved` that `new` lacks. With `names` (every other backend
    of `new` is known to be held by `saved` as is: `names_to_compare`) only those and the
    `dirty` ones are looked at: O(changed) at 8,000 backends."""
    if names is not None:
        candidates = sorted({*names, *dirty})
        return Changes(
            {
                name: slots
                for name in candidates
                if (slots := new.get(name)) is not None
                and (name in dirty or ((old := saved.get(name)) is not slots and old != slots))
            },
            tuple(name for name in candidates if name in saved and name not in new),
        )
    written = {
        name: slots
        for name, slots in new.items()
        if name in dirty or ((old := saved.get(name)) is not slots and old != slots)
    }
    deleted = tuple(sorted(saved.keys() - new.keys()))
    return Changes(written, deleted)


class MemoryLedger:
    """No persistence: `compute` without --state, serve in files mode without --state, tests."""

    def __init__(self, assignment: SlotAssignment | None = None) -> None:
        self.assignment: SlotAssignment = assignment or {}

    def load(self) -> tuple[SlotAssignment, list[str]]:
        return self.assignment, []

    def save(self, assignment: SlotAssignment, since: Since | None = None) -> None:
        self.assignment = assignment

    def dirty(self) -> bool:
        return False
