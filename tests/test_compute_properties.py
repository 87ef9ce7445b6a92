"""Property tests: determinism, order independence, sticky slots, fallbacks."""

from __future__ import annotations

import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.compute import compute
from controlplane.compute.slots import assignment_from_json, assignment_to_json
from controlplane.compute.values import Invalid, parse_balance, parse_hash_type
from controlplane.model import ClusterState
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
    return {s.address: s.index for s in b.slots if s.enabled}


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
    assert {k: v.payload for k, v in one.snapshots.items()} == {
        k: v.payload for k, v in two.snapshots.items()
    }
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
                json.loads(json.dumps(assignment_to_json(assignment)))
            )
            assert errors == []
        result = compute(backend_state(endpoints), assignment)
        slots = slot_map(result.snapshots[WORKLOAD].message())
        assert set(slots) == endpoints
        assert len(set(slots.values())) == len(slots), "two endpoints share a slot"
        for address in endpoints & set(previous_slots):
            assert slots[address] == previous_slots[address]
        (b,) = result.snapshots[WORKLOAD].message().backends
        assert len(b.slots) % 5 == 0 and len(b.slots) >= len(endpoints)
        previous_slots = slots
        assignment = dict(result.assignment)


@given(endpoints=address_sets)
def test_no_history_means_sorted_order(endpoints: set[str]) -> None:
    result = compute(backend_state(endpoints), {})
    slots = slot_map(result.snapshots[WORKLOAD].message())
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
    baseline = (
        compute(cluster(services=[service("s")], pods=DEFAULT_PODS, config=config), {})
        .snapshots[WORKLOAD]
        .message()
    )
    result = compute(cluster(services=[svc], pods=DEFAULT_PODS, config=config), {})
    (b,) = result.snapshots[WORKLOAD].message().backends
    (base,) = baseline.backends
    if b.warnings:
        assert len(b.warnings) == 1
        assert b.warnings[0].key == f"haproxy.org/{key}"
        b.ClearField("warnings")
        assert b == base  # the ConfigMap's value is in force
    # else: the garbage happened to be a valid value; nothing to check beyond no warning


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(VALID)), garbage=st.text(max_size=40))
def test_rejected_configmap_value_leaves_the_default_in_force(key: str, garbage: str) -> None:
    config = settings_map(**{key: garbage})
    result = compute(cluster(services=[service("s")], pods=DEFAULT_PODS, config=config), {})
    default = compute(cluster(services=[service("s")], pods=DEFAULT_PODS), {})
    snap = result.snapshots[WORKLOAD].message()
    if snap.warnings:
        assert [w.key for w in snap.warnings] == [key]
        assert snap.backends[0] == default.snapshots[WORKLOAD].message().backends[0]


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
