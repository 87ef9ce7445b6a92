"""Property tests: determinism, order independence, sticky slots, fallbacks."""

from __future__ import annotations

import dataclasses
import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.compute import Computer, compute
from controlplane.ledger.codec import assignment_from_json, assignment_to_json
from controlplane.model import ClusterState
from controlplane.publish import encode
from controlplane.settings.values import Invalid, parse_balance, parse_hash_type
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    haproxy_pod,
    service,
)
from tests.helpers.builders import settings as settings_map

addresses = st.integers(min_value=1, max_value=250).map(lambda i: f"127.0.5.{i}")
address_sets = st.sets(addresses, max_size=30)


def backend_state(addrs: set[str], step: int = 5) -> ClusterState:
    svc = service("s", annotations={"haproxy.org/server-slots": str(step)})
    return cluster(services=[svc], slices=[endpoint_slice("s", sorted(addrs))], pods=DEFAULT_PODS)


def slot_map(result_snapshot) -> dict[str, int]:  # type: ignore[no-untyped-def]
    (b,) = result_snapshot.backends
    return {s.address: s.index for s in b.slot_list() if s.enabled}


@settings(max_examples=60, deadline=None)
@given(
    pods=st.lists(st.integers(min_value=1, max_value=60), unique=True, max_size=8),
    endpoints=address_sets,
    seed=st.integers(),
)
def test_deterministic_and_independent_of_input_order(
    pods: list[int], endpoints: set[str], seed: int
) -> None:
    services = [service("a"), service("b", annotations={"haproxy.org/hosts": "b.example.com"})]
    slices = [
        endpoint_slice("a", sorted(endpoints)),
        endpoint_slice("b", sorted(endpoints)[:3], name="b1"),
        endpoint_slice("b", sorted(endpoints)[3:], name="b2"),
    ]
    pod_list = [haproxy_pod(f"haproxy-{i}", f"127.0.1.{i}") for i in pods]
    rng = random.Random(seed)
    shuffled = [list(x) for x in (services, slices, pod_list)]
    for items in shuffled:
        rng.shuffle(items)
    one = compute(cluster(services, slices, pod_list), {})
    two = compute(cluster(*shuffled), {})
    assert one.workloads == two.workloads
    assert encode(one.workloads) == encode(two.workloads)  # equal bytes, equal hashes
    assert one.assignment == two.assignment


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=st.lists(st.tuples(address_sets, st.booleans()), min_size=1, max_size=12))
def test_surviving_endpoint_never_changes_slot(history: list[tuple[set[str], bool]]) -> None:
    """Scale-ups, scale-downs and control-plane restarts from the persisted assignment."""
    assignment: dict = {}  # type: ignore[type-arg]
    previous_slots: dict[str, int] = {}
    for endpoints, restart in history:
        if restart:  # a new control plane continues from what was persisted
            assignment, errors = assignment_from_json(
                json.loads(json.dumps(assignment_to_json(assignment))), 0.0
            )
            assert errors == []
        result = compute(backend_state(endpoints), assignment)
        slots = slot_map(result.workloads[WORKLOAD])
        assert set(slots) == endpoints
        assert len(set(slots.values())) == len(slots), "two endpoints share a slot"
        for address in endpoints & set(previous_slots):
            assert slots[address] == previous_slots[address]
        (b,) = result.workloads[WORKLOAD].backends
        assert b.slots.count % 5 == 0 and b.slots.count >= len(endpoints)
        previous_slots = slots
        assignment = dict(result.assignment)


EXPIRE_S = 60
T0 = 1_700_000_000.0


def persistent_state(addrs: set[str]) -> ClusterState:
    notes = {
        "haproxy.org/server-slots": "4",
        "haproxy.org/source-ip-persistence": "true",
        "haproxy.org/source-ip-persistence-expire": "1m",
        "haproxy.org/load-balance": "source",
    }
    svc = service("s", annotations=notes)
    return cluster(services=[svc], slices=[endpoint_slice("s", sorted(addrs))], pods=DEFAULT_PODS)


def roundtrip(assignment: dict, now: float) -> dict:  # type: ignore[type-arg]
    """What a restarted or standby replica loads from the persisted assignment."""
    loaded, errors = assignment_from_json(
        json.loads(json.dumps(assignment_to_json(assignment))), now
    )
    assert errors == []
    return dict(loaded)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(
        st.tuples(address_sets, st.booleans(), st.integers(min_value=0, max_value=90)),
        min_size=1,
        max_size=14,
    )
)
def test_freed_slots_wait_out_the_expire_and_replicas_agree(
    history: list[tuple[set[str], bool, int]],
) -> None:
    """docs/design.md "Slots": a slot freed less than the stick-table expire ago is never
    given to another endpoint (the one that left it may take it back; past the expire the
    slot is forgotten and free for any endpoint); a surviving
    endpoint never moves; a replica that loads the persisted
    assignment and is given the same state and time decides exactly what the running one
    (incremental, in memory) decides."""
    computer = Computer()
    assignment: dict = {}  # type: ignore[type-arg]
    previous_slots: dict[str, int] = {}
    freed_at: dict[int, tuple[float, str]] = {}  # slot -> when, by which address
    now = T0
    for endpoints, restart, elapsed in history:
        now += elapsed
        # Past its quarantine a freed slot is forgotten: free for anyone, its endpoint too.
        freed_at = {s: (when, by) for s, (when, by) in freed_at.items() if when + EXPIRE_S > now}
        if restart:  # the running replica is replaced by one that loads the ledger
            computer = Computer()
            assignment = roundtrip(assignment, now)
        result = computer.compute(persistent_state(endpoints), assignment, now=now)
        other = compute(persistent_state(endpoints), roundtrip(assignment, now), now=now)
        assert other.assignment == result.assignment, "replicas decide differently"
        assert other.workloads == result.workloads
        assert encode(other.workloads) == encode(result.workloads)
        slots = slot_map(result.workloads[WORKLOAD])
        assert set(slots) == endpoints
        assert len(set(slots.values())) == len(slots), "two endpoints share a slot"
        for address in endpoints & set(previous_slots):
            assert slots[address] == previous_slots[address], "a surviving endpoint moved"
        for address in set(previous_slots) - endpoints:
            freed_at[previous_slots[address]] = (now, address)
        for address in endpoints - set(previous_slots):
            slot = slots[address]
            if slot in freed_at:
                when, by = freed_at.pop(slot)
                assert by == address or when + EXPIRE_S <= now, f"slot {slot} reused too soon"
            else:
                assert address not in {by for _, by in freed_at.values()}, (
                    f"{address} came back to a new slot while its own was free"
                )
        previous_slots = slots
        assignment = dict(result.assignment)


def test_freed_slot_order_never_used_then_oldest_freed() -> None:
    from controlplane.compute.slots import assign_slots

    a, b, c, d, e, f = ((f"127.0.5.{i}", 80) for i in range(1, 7))
    first = assign_slots([a, b, c], None, 4, now=100.0, quarantine_s=10)
    assert dict(first.slots) == {a: 1, b: 2, c: 3}
    gone_b = assign_slots([a, c], first, 4, now=101.0, quarantine_s=10)
    gone_a = assign_slots([c], gone_b, 4, now=102.0, quarantine_s=10)
    assert dict(gone_a.freed) == {1: 102.0, 2: 101.0}
    assert dict(gone_a.freed_by) == {1: a, 2: b}
    # The never-used slot 4 first; then nothing is eligible: the count grows.
    early = assign_slots([c, d, e, f], gone_a, 4, now=105.0, quarantine_s=10)
    assert dict(early.slots) == {c: 3, d: 4, e: 5, f: 6} and early.count == 8
    # Once both quarantines passed, slots 1 and 2 are forgotten (no entry can name them:
    # the ledger keeps no history past one quarantine) and count as never used: lowest first.
    late = assign_slots([c, d, e, f], gone_a, 4, now=112.0, quarantine_s=10)
    assert dict(late.slots) == {c: 3, d: 1, e: 2, f: 4} and late.count == 4
    assert dict(late.freed) == {} and dict(late.freed_by) == {}
    # One lapsed, one not: the lapsed one is forgotten, the other still waits.
    half = assign_slots([c], gone_a, 4, now=111.5, quarantine_s=10)
    assert dict(half.freed) == {1: 102.0} and dict(half.freed_by) == {1: a}
    # At the slot limit the oldest quarantined slots are taken rather than none.
    capped = assign_slots([c, d, e, f], gone_a, 4, now=105.0, quarantine_s=10, max_slots=4)
    assert dict(capped.slots) == {c: 3, d: 4, e: 2, f: 1} and capped.count == 4
    # An endpoint that comes back (a readiness flap) takes its own slot at once.
    flap = assign_slots([a, c, d], gone_a, 4, now=103.0, quarantine_s=10)
    assert dict(flap.slots) == {a: 1, c: 3, d: 4}
    assert dict(flap.freed) == {2: 101.0} and dict(flap.freed_by) == {2: b}


@given(endpoints=address_sets)
def test_no_history_means_sorted_order(endpoints: set[str]) -> None:
    result = compute(backend_state(endpoints), {})
    slots = slot_map(result.workloads[WORKLOAD])
    ordered = sorted(endpoints, key=lambda a: int(a.rsplit(".", 1)[1]))
    assert [slots[a] for a in ordered] == list(range(1, len(ordered) + 1))


VALID = {
    "load-balance": "leastconn",
    "hash-type": "consistent",
    "source-ip-persistence-size": "10k",
    "source-ip-persistence-expire": "5m",
    "server-slots": "7",
}


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(VALID)), garbage=st.text(max_size=40))
def test_rejected_service_value_leaves_the_configmap_value_in_force(key: str, garbage: str) -> None:
    config = settings_map(**{"source-ip-persistence": "true", **VALID})
    svc = service("s", annotations={f"haproxy.org/{key}": garbage})
    baseline = compute(
        cluster(services=[service("s")], pods=DEFAULT_PODS, config=config), {}
    ).workloads[WORKLOAD]
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS, config=config), {})
    (b,) = result.workloads[WORKLOAD].backends
    (base,) = baseline.backends
    if b.warnings:
        assert len(b.warnings) == 1
        assert b.warnings[0].key == f"haproxy.org/{key}"
        assert dataclasses.replace(b, warnings=()) == base  # the ConfigMap's value is in force
    # else: the garbage happened to be a valid value; nothing to check beyond no warning


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(VALID)), garbage=st.text(max_size=40))
def test_rejected_configmap_value_leaves_the_default_in_force(key: str, garbage: str) -> None:
    config = settings_map(**{key: garbage})
    result = compute(cluster(services=[service("s")], pods=DEFAULT_PODS, config=config), {})
    default = compute(cluster(services=[service("s")], pods=DEFAULT_PODS), {})
    snap = result.workloads[WORKLOAD]
    if snap.warnings:
        assert [w.key for w in snap.warnings] == [key]
        assert snap.backends[0] == default.workloads[WORKLOAD].backends[0]


@given(st.text(max_size=30))
def test_balance_parser_accepts_only_strict_forms(text: str) -> None:
    try:
        balance = parse_balance(text, "http")
    except Invalid:
        return
    rendered = f"{balance.algorithm} {balance.argument}".strip()
    assert "\n" not in rendered and "#" not in rendered
    assert all(c.isalnum() or c in "_.-() " for c in rendered)


@given(st.text(max_size=30))
def test_hash_type_parser_output_is_plain_words(text: str) -> None:
    try:
        value = parse_hash_type(text)
    except Invalid:
        return
    assert all(word.isalnum() or word == "map-based" for word in value.split(" "))
