"""The plan cache's queue of lapsing slot history: one entry per Service however often it
is planned again, and the history still forgotten on time (issue 33's soak: each endpoint
change of a Service with persistence added an entry, kept for the whole quarantine)."""

from __future__ import annotations

from controlplane.compute import Computer, compute
from controlplane.model import ClusterState
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service

EXPIRE_S = 60.0
T0 = 1_700_000_000.0
NOTES = {
    "haproxy.org/server-slots": "4",
    "haproxy.org/source-ip-persistence": "true",
    "haproxy.org/source-ip-persistence-expire": "1m",
}


def moving(step: int) -> ClusterState:
    """Two Services whose second endpoint moves between two addresses and back (the
    soak's stream): every change frees a slot, so every plan holds history."""
    moved = "10.0.0.3" if step % 2 else "10.0.0.2"
    names = ("shop", "cart")
    return cluster(
        services=[service(name, annotations=NOTES) for name in names],
        slices=[endpoint_slice(name, ["10.0.0.1", moved]) for name in names],
        pods=DEFAULT_PODS,
    )


def test_the_lapse_queue_holds_one_entry_per_service_over_many_changes() -> None:
    computer = Computer()
    assignment: dict = {}  # type: ignore[type-arg]
    for step in range(200):  # 0.1 s apart: all inside one quarantine
        result = computer.compute(moving(step), assignment, now=T0 + step * 0.1)
        assignment = dict(result.assignment)
    assert len(computer._plans._lapses) <= 2  # one per Service (398 before)


def test_the_history_still_lapses_on_time_after_many_changes() -> None:
    """The queued entry is the first change's lapse; when it comes the plan holds later
    history, and is queued again for its own time: each step's result is a fresh
    computation's, the history forgotten exactly when the quarantine ends."""
    computer = Computer()
    assignment: dict = {}  # type: ignore[type-arg]
    times = [T0 + step * 10.0 for step in range(8)]  # past the first frees' quarantine
    times += [times[-1] + EXPIRE_S - 5, times[-1] + EXPIRE_S + 1, times[-1] + 2 * EXPIRE_S]
    for step, now in enumerate(times):
        state = moving(min(step, 7))  # the moves stop: only time goes on
        result = computer.compute(state, assignment, now=now)
        fresh = compute(state, assignment, now=now)
        assert result.assignment == fresh.assignment, step
        assert result.workloads[WORKLOAD] == fresh.workloads[WORKLOAD], step
        assignment = dict(result.assignment)
    for slots in assignment.values():  # a quarantine after the last move: all forgotten
        assert dict(slots.freed) == {}
    assert computer._plans._lapses == []
