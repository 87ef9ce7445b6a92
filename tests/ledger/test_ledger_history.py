"""The slot ledger's history is bounded: a day of rolling restarts keeps it flat.

A freed slot's record (when, by whom) is kept for one stick-table expire, then forgotten
(docs/design.md, "Slots"): 100 pods replaced every 5 minutes for 24 hours, with the
default 30-minute expire, leave the ledger the size it had after the first hour, in
memory, in its JSON form and in the files ledger on disk.
"""

from __future__ import annotations

from pathlib import Path

from controlplane.compute import Computer
from controlplane.ledger.codec import backend_text
from controlplane.ledger.sqlite import FileLedger
from controlplane.snapshot import SlotAssignment
from tests.helpers.builders import DEFAULT_PODS, cluster, endpoint_slice, service

T0 = 1_800_000_000.0
PODS = 100
EVERY_S = 300
EXPIRE_S = 30 * 60  # the default stick-table expire


def rollout_state(generation: int) -> object:
    """The Service with its 100 pods of `generation` (new pods, new addresses)."""
    first = generation * PODS
    # Addresses of one text length, so the size measures history, not digits.
    addresses = [
        f"10.{100 + n // 10000 % 100}.{100 + n // 100 % 100}.{100 + n % 100}"
        for n in range(first, first + PODS)
    ]
    notes = {"haproxy.org/source-ip-persistence": "true"}
    return cluster(
        services=[service("web", annotations=notes)],
        slices=[endpoint_slice("web", addresses)],
        pods=DEFAULT_PODS,
    )


def ledger_bytes(assignment: SlotAssignment) -> int:
    return sum(len(backend_text(slots)) for slots in assignment.values())


def test_a_day_of_rolling_restarts_keeps_the_ledger_flat(tmp_path: Path) -> None:
    computer = Computer()
    ledger = FileLedger(tmp_path / "slots.db", clock=lambda: T0)
    assignment: SlotAssignment = {}
    sizes: dict[int, tuple[int, int, int]] = {}  # hour -> bytes, freed records, slot count
    for step in range(24 * 3600 // EVERY_S + 1):
        now = T0 + step * EVERY_S
        result = computer.compute(rollout_state(step), assignment, now=now)  # type: ignore[arg-type]
        assignment = result.assignment
        ledger.save(assignment)
        (slots,) = assignment.values()
        assert len(slots.slots) == PODS
        assert all(at + EXPIRE_S > now for at in slots.freed.values()), "lapsed history kept"
        if step % (3600 // EVERY_S) == 0:
            sizes[step * EVERY_S // 3600] = (
                ledger_bytes(assignment),
                len(slots.freed),
                slots.count,
            )
    first_hour, last = sizes[1], sizes[24]
    # At most one expire's worth of freed records: 6 rollouts of 100 pods in 30 minutes.
    assert last[1] <= EXPIRE_S // EVERY_S * PODS
    assert last[2] == first_hour[2], "the slot count stopped growing after the first hour"
    assert max(size for size, _, _ in sizes.values() if size) <= first_hour[0] * 1.01, sizes
    loaded, problems = FileLedger(tmp_path / "slots.db", clock=lambda: T0).load()
    assert problems == [] and dict(loaded) == dict(assignment)
