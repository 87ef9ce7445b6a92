"""Slot assignments as the loop persists them: whether two are the same (a save is skipped
when they are), and what a failed save did write (what may still be published).
"""

from __future__ import annotations

from controlplane.ledger.store import LedgerWriteError
from controlplane.snapshot import SlotAssignment


def same_assignment(
    a: SlotAssignment, b: SlotAssignment, touched: frozenset[str] | None = None
) -> bool:
    """Equal content, whatever mapping types hold it (saves are skipped when equal).
    With `touched` (every backend whose object may differ) only those are compared."""
    if a is b:
        return True
    if touched is not None:
        return all(a.get(k) == b.get(k) for k in touched)
    if a.keys() != b.keys():
        return False
    # Unchanged backends keep their BackendSlots object: identity settles most of them.
    return all(
        a[k] is b[k]
        or (
            a[k].count == b[k].count
            and dict(a[k].slots) == dict(b[k].slots)
            and dict(a[k].freed) == dict(b[k].freed)
            and dict(a[k].freed_by) == dict(b[k].freed_by)
        )
        for k in a
    )


def written_part(
    error: Exception, previous: SlotAssignment, assignment: SlotAssignment
) -> SlotAssignment | None:
    """What a failed save did write: `assignment` with each backend the error names as
    unwritten back at its `previous` slots (or left out, if new); None when the error does
    not say what was written (nothing may be published)."""
    unwritten = error.unwritten if isinstance(error, LedgerWriteError) else None
    if unwritten is None:
        return None
    written = {name: slots for name, slots in assignment.items() if name not in unwritten}
    written.update({name: previous[name] for name in unwritten if name in previous})
    return written
