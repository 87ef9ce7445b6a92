"""Addresses in compute and in the slot ledgers: one canonical text, no zone suffixes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import MappingProxyType

import pytest

from controlplane.compute import compute
from controlplane.ledger.codec import assignment_from_json, assignment_to_json
from controlplane.snapshot import BackendSlots, SlotAssignment
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    haproxy_pod,
    service,
)
from tests.helpers.ledger import kube_ledger
from tests.kubeapi import FakeKubeAPI

BACKEND = "default_s_http"
NOW = 1_700_000_000.0  # wall-clock time the state is read at


@pytest.mark.parametrize("ip", ["fe80::1%eth0", "fe80::1%x;disable frontend fe_http", "10.0.0.9 "])
def test_a_pod_ip_with_a_zone_is_reported_and_left_out_of_peers(ip: str) -> None:
    pods = [*DEFAULT_PODS, haproxy_pod("haproxy-z", ip)]
    result = compute(cluster(services=[service("s")], pods=pods), {})
    snap = result.workloads[WORKLOAD]
    assert [(p.name, p.address) for p in snap.peers.peers] == [
        ("haproxy-a", "127.0.1.1"),
        ("haproxy-b", "127.0.1.2"),
    ]
    (rejection,) = [r for r in result.rejections if r.kind == "Pod"]
    assert (rejection.name, rejection.key) == ("haproxy-z", "status.podIP")
    assert "zone" in rejection.reason and "\n" not in rejection.value


def test_peer_and_endpoint_addresses_are_canonical_text() -> None:
    pods = [haproxy_pod("haproxy-a", "FE80:0:0:0:0:0:0:1"), haproxy_pod("haproxy-b", "::10.0.0.2")]
    slices = [endpoint_slice("s", ["0:0:0:0:0:ffff:10.0.0.1", "::A00:3"], address_type="IPv6")]
    snap = compute(cluster([service("s")], slices, pods), {}).workloads[WORKLOAD]
    assert [p.address for p in snap.peers.peers] == ["fe80::1", "::a00:2"]
    assert [s.address for s in snap.backends[0].slot_list() if s.enabled] == [
        "::a00:3",
        "::ffff:a00:1",
    ]


def _history(addresses: tuple[str, str, str]) -> tuple[SlotAssignment, dict[str, int]]:
    """A and B arrive (A=SRV_1, B=SRV_2); A leaves; C arrives. B keeps SRV_2, so the
    assignment differs from sorted order, as a long-lived one does."""
    a, b, c = addresses

    def run(endpoints: list[str], previous: SlotAssignment) -> SlotAssignment:
        slices = [endpoint_slice("s", endpoints, address_type="IPv6")]
        return compute(cluster([service("s")], slices, DEFAULT_PODS), previous).assignment

    assignment = run([a, b], {})
    assignment = run([b], assignment)
    assignment = run([b, c], assignment)
    return assignment, by_address(assignment)


def by_address(assignment: SlotAssignment) -> dict[str, int]:
    return {addr: slot for (addr, _port), slot in assignment[BACKEND].slots.items()}


def recompute(addresses: tuple[str, str, str], previous: SlotAssignment) -> dict[str, int]:
    _a, b, c = addresses
    slices = [endpoint_slice("s", [b, c], address_type="IPv6")]
    return by_address(compute(cluster([service("s")], slices, DEFAULT_PODS), previous).assignment)


# IPv4-compatible and IPv4-mapped endpoints, as an EndpointSlice may spell them.
HISTORIES = [
    ("::10.0.0.1", "::10.0.0.2", "::10.0.0.3"),
    ("::ffff:10.0.0.1", "::ffff:10.0.0.2", "::ffff:10.0.0.3"),
    ("2001:db8::1", "2001:db8::2", "2001:db8::3"),
]


@pytest.mark.parametrize("addresses", HISTORIES)
def test_slots_survive_a_restart_through_the_state_file_form(
    addresses: tuple[str, str, str],
) -> None:
    assignment, before = _history(addresses)
    _a, b, c = addresses
    assert before != {b: 1, c: 2}  # history, not sorted order: a restart must keep it
    document = json.loads(json.dumps(assignment_to_json(assignment)))
    loaded, errors = assignment_from_json(document, NOW)
    assert errors == []
    assert recompute(addresses, loaded) == before


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    yield server
    server.stop()


@pytest.mark.parametrize("addresses", HISTORIES[:2])
def test_slots_survive_a_leader_change_through_the_configmap(
    api: FakeKubeAPI, addresses: tuple[str, str, str]
) -> None:
    assignment, before = _history(addresses)
    with kube_ledger(api.url) as (leader, _):
        leader.load()
        leader.save(assignment)
    with kube_ledger(api.url) as (successor, _):
        loaded, problems = successor.load()
    assert problems == []
    assert recompute(addresses, loaded) == before


def test_a_state_entry_with_a_zone_drops_that_backend_with_a_bounded_reason() -> None:
    good = BackendSlots(count=4, slots=MappingProxyType({("10.0.0.1", 80): 1}))
    document = assignment_to_json({"good": good})
    document["backends"]["bad"] = {"count": 4, "slots": [["fe80::1%x\n" + "y" * 500, 80, 1]]}
    loaded, errors = assignment_from_json(document, NOW)
    assert list(loaded) == ["good"]
    (error,) = errors
    assert "zone suffix not allowed" in error and "\n" not in error and len(error) < 200
