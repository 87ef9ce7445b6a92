"""A follower's computation (`assign_new=False`): it never invents a slot.

It computes with the leader's ledger as the previous assignment: endpoints the ledger
has keep their slots, removals are served at once, and endpoints the ledger lacks wait
(left out, counted, not warned about). Once the ledger covers the cluster, the follower's
content is the leader's, byte for byte, slot count and quarantined slots included.
"""

from __future__ import annotations

import json

from controlplane.compute import Computer, compute
from controlplane.compute.slots import assign_slots
from controlplane.ledger.codec import assignment_from_json, assignment_to_json
from controlplane.model import ClusterState
from controlplane.publish import encode_one
from controlplane.snapshot import ComputeResult, SlotAssignment
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service

A, B, C, D = (("10.0.0.1", 80), ("10.0.0.2", 80), ("10.0.0.3", 80), ("10.0.0.4", 80))
PERSIST = {"haproxy.org/source-ip-persistence": "true", "haproxy.org/load-balance": "source"}


def state(*addresses: str, slots: str = "2") -> ClusterState:
    notes = {**PERSIST, "haproxy.org/server-slots": slots}
    return cluster(
        [service("shop", annotations=notes)],
        [endpoint_slice("shop", addresses)],
        DEFAULT_PODS,
    )


def content_hash(result: ComputeResult) -> str:
    return encode_one(result.workloads[WORKLOAD]).content_hash


def enabled(result: ComputeResult) -> dict[int, str]:
    (backend,) = result.workloads[WORKLOAD].backends
    return {slot: address for (address, _), slot in backend.slots.slots.items()}


def through_ledger(assignment: SlotAssignment, now: float) -> SlotAssignment:
    """What a follower reads back: the leader's assignment as the ConfigMap stores it."""
    text = json.dumps(assignment_to_json(assignment))
    ledger, problems = assignment_from_json(json.loads(text), now)
    assert problems == []
    return ledger


def test_no_new_slot_for_an_endpoint_the_ledger_lacks() -> None:
    ledger = assign_slots([A, B], None, 4, now=10.0, quarantine_s=60)
    follower = assign_slots([A, B, C], ledger, 4, now=11.0, quarantine_s=60, assign_new=False)
    assert dict(follower.slots) == {A: 1, B: 2}
    assert follower.count == 4 and not follower.freed


def test_removal_is_served_at_once_and_the_slot_count_never_grows() -> None:
    ledger = assign_slots([A, B], None, 2, now=10.0, quarantine_s=60)
    follower = assign_slots([B, C, D], ledger, 2, now=11.0, quarantine_s=60, assign_new=False)
    assert dict(follower.slots) == {B: 2}
    assert follower.count == 2  # the leader grows it; the ledger will say by how much
    assert dict(follower.freed_by) == {1: A}


def test_an_endpoint_back_in_its_freed_slot_waits_for_the_ledger_too() -> None:
    first = assign_slots([A, B], None, 4, now=10.0, quarantine_s=60)
    ledger = assign_slots([B], first, 4, now=11.0, quarantine_s=60)
    follower = assign_slots([A, B], ledger, 4, now=12.0, quarantine_s=60, assign_new=False)
    assert dict(follower.slots) == {B: 2}
    assert dict(assign_slots([A, B], ledger, 4, now=12.0, quarantine_s=60).slots) == {A: 1, B: 2}


def test_waiting_endpoints_are_counted_not_warned_about() -> None:
    leader = compute(state("10.0.0.1"), {}, now=10.0)
    follower = compute(
        state("10.0.0.1", "10.0.0.2", "10.0.0.3"), leader.assignment, now=11.0, assign_new=False
    )
    assert enabled(follower) == {1: "10.0.0.1"}
    assert follower.waiting == {WORKLOAD: 2}
    assert follower.rejections == ()
    assert leader.waiting == {} and follower.workloads[WORKLOAD].warning_count == 0


def test_follower_content_equals_the_leader_once_it_reads_the_ledger() -> None:
    """Through growth past server-slots, removals and quarantined slots: whenever the
    follower has the leader's latest ledger, it publishes the leader's content hash."""
    history = [
        ("10.0.0.1", "10.0.0.2"),
        ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"),  # grows 2 -> 6
        ("10.0.0.2", "10.0.0.5"),  # three freed, in quarantine
        ("10.0.0.2", "10.0.0.5", "10.0.0.6", "10.0.0.1"),  # never-used slot; 1 comes back
    ]
    leader_computer, follower_computer = Computer(), Computer()
    ledger: SlotAssignment = {}
    for step, addresses in enumerate(history):
        now = 100.0 + step
        # The follower sees the new state before the leader's ledger write: the new
        # endpoints wait, the removed ones are gone at once.
        early = follower_computer.compute(state(*addresses), ledger, now=now, assign_new=False)
        kept = {a for a in addresses if any(a == k[0] for b in ledger.values() for k in b.slots)}
        assert set(enabled(early).values()) == kept
        leader = leader_computer.compute(state(*addresses), ledger, now=now)
        ledger = through_ledger(leader.assignment, now + 0.5)
        late = follower_computer.compute(state(*addresses), ledger, now=now + 1, assign_new=False)
        assert late.waiting == {}
        assert content_hash(late) == content_hash(leader), f"step {step}"
        assert enabled(late) == enabled(leader)


def test_a_computer_switching_to_leader_assigns_the_waiting_endpoints() -> None:
    """Promotion with the same ledger object: the follower's plans are not reused."""
    computer = Computer()
    ledger = compute(state("10.0.0.1"), {}, now=1.0).assignment
    follower = computer.compute(state("10.0.0.1", "10.0.0.2"), ledger, now=2.0, assign_new=False)
    assert enabled(follower) == {1: "10.0.0.1"}
    leader = computer.compute(state("10.0.0.1", "10.0.0.2"), ledger, now=3.0)
    assert enabled(leader) == {1: "10.0.0.1", 2: "10.0.0.2"}
    assert leader.waiting == {}


def test_a_follower_handed_a_new_ledger_plans_only_the_services_it_changed() -> None:
    """The ledger watch hands a new mapping on every shard change, keeping the other
    backends' objects: the follower plans again only the Services whose backends the
    new ledger changed (here the one whose endpoints changed), and still equals a fresh
    computation at every step."""
    names = [f"s{i}" for i in range(6)]
    sizes = dict.fromkeys(names, 2)
    services = [service(n, annotations=PERSIST) for n in names]
    slices: dict[tuple[str, int], object] = {}  # unchanged objects stay the same, as informed

    def many() -> ClusterState:
        for i, n in enumerate(names):
            if (n, sizes[n]) not in slices:
                addresses = [f"10.1.{i}.{a}" for a in range(1, sizes[n] + 1)]
                slices[(n, sizes[n])] = endpoint_slice(n, addresses)
        return cluster(services, [slices[(n, sizes[n])] for n in names], DEFAULT_PODS)  # type: ignore[misc]

    leader, follower = Computer(), Computer()
    ledger: dict = {}  # type: ignore[type-arg]
    for step in range(8):
        now = 100.0 + step
        if step:
            sizes[names[step % 6]] += 1  # one Service gains an endpoint
        assignment = leader.compute(many(), ledger, now=now).assignment
        # A watch's view: a new mapping, unchanged backends the very same objects.
        ledger = {
            name: (ledger[name] if ledger.get(name) == slots else slots)
            for name, slots in assignment.items()
        }
        got = follower.compute(many(), ledger, now=now + 0.5, assign_new=False)
        fresh = compute(many(), ledger, now=now + 0.5, assign_new=False)
        assert got.workloads == fresh.workloads, f"step {step}"
        assert got.waiting == {}
        if step:
            assert follower.planned == 1, f"step {step}: planned {follower.planned}"
            assert follower.checked == 1, f"step {step}: looked at {follower.checked}"
