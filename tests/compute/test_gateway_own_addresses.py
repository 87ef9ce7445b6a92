"""Gateways' addresses of their own from the settings' `gateway-address-pool`
(controlplane/routes/addresses.py `own_addresses`, placement's lanes): stable for a
Gateway's life, first-come for new ones, static `spec.addresses` in the pool honoured;
and the per-address listeners the route table makes of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.compute import compute
from controlplane.model import GATEWAY_GROUP, GatewayAddress
from controlplane.routes.addresses import OwnAddress, own_addresses
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.routes.table import compute_routes
from controlplane.settings.values import Invalid, parse_address_pool
from tests.helpers.builders import settings
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to

POOL = "192.0.2.10-192.0.2.12"
WORKLOAD = "haproxy-system/haproxy"


def ip(value: str) -> GatewayAddress:
    return GatewayAddress("IPAddress", value)


def gw(name: str, created: str, *, status: tuple[str, ...] = (), spec: tuple[str, ...] = ()) -> Any:
    return dataclasses.replace(
        gateway(name, port=80, created=created),
        status_addresses=tuple(ip(a) for a in status),
        addresses=tuple(ip(a) for a in spec),
    )


def given(*gateways: Any, pool: str = POOL) -> dict[str, str]:
    found = own_addresses(gateways, parse_address_pool(pool))
    return {key[1]: own.address or f"none: {own.why_none}" for key, own in found.items()}


def test_new_gateways_take_the_first_free_addresses_oldest_first() -> None:
    b = gw("b", "2026-01-02T00:00:00Z")
    a = gw("a", "2026-01-01T00:00:00Z")
    assert given(b, a) == {"a": "192.0.2.10", "b": "192.0.2.11"}


def test_an_address_its_status_lists_is_kept_across_restarts_and_deletions() -> None:
    a = gw("a", "2026-01-01T00:00:00Z", status=("192.0.2.10",))
    b = gw("b", "2026-01-02T00:00:00Z", status=("192.0.2.11",))
    # a is deleted: b keeps .11 (no renumbering), a new Gateway takes the free .10
    c = gw("c", "2026-01-03T00:00:00Z")
    assert given(b, c) == {"b": "192.0.2.11", "c": "192.0.2.10"}
    # a restart reads every address back, whatever the order of arrival
    assert given(b, a) == {"a": "192.0.2.10", "b": "192.0.2.11"}


def test_a_status_address_outside_the_pool_or_held_by_an_older_gateway_is_not_kept() -> None:
    a = gw("a", "2026-01-01T00:00:00Z", status=("192.0.2.11",))
    b = gw("b", "2026-01-02T00:00:00Z", status=("192.0.2.11",))  # a copy: the older keeps it
    c = gw("c", "2026-01-03T00:00:00Z", status=("127.0.1.1",))  # the pods', before the pool
    assert given(a, b, c) == {"a": "192.0.2.11", "b": "192.0.2.10", "c": "192.0.2.12"}


def test_an_exhausted_pool_leaves_the_newest_on_the_workloads_addresses() -> None:
    gateways = [gw(n, f"2026-01-0{i}T00:00:00Z") for i, n in enumerate("abcd", start=1)]
    found = given(*gateways)
    assert found["c"] == "192.0.2.12"
    assert found["d"] == "none: the settings' gateway-address-pool has no free address"


def test_spec_addresses_in_the_pool_are_honoured_and_first_come_for_a_contested_one() -> None:
    a = gw("a", "2026-01-01T00:00:00Z")
    b = gw("b", "2026-01-02T00:00:00Z", spec=("192.0.2.10",))  # static: before new ones
    c = gw("c", "2026-01-03T00:00:00Z", spec=("192.0.2.10",))
    d = gw("d", "2026-01-04T00:00:00Z", spec=("198.51.100.1",))  # not in the pool
    found = given(a, b, c, d)
    assert found["b"] == "192.0.2.10"
    assert found["a"] == "192.0.2.11"
    assert (
        found["c"]
        == "none: spec.addresses 192.0.2.10 is the address of the older Gateway default/b"
    )
    assert "d" not in found  # asks for addresses outside the pool: the workload's rule


def test_no_pool_gives_no_address() -> None:
    assert own_addresses([gw("a", "")], None) == {}


@pytest.mark.parametrize(
    ("text", "addresses"),
    [
        ("192.0.2.1", ["192.0.2.1"]),
        (
            "192.0.2.1-192.0.2.3, 10.0.0.0/30",
            ["192.0.2.1", "192.0.2.2", "192.0.2.3", "10.0.0.1", "10.0.0.2"],
        ),
        ("10.0.0.4/31", ["10.0.0.4", "10.0.0.5"]),
        ("2001:DB8::/127", ["2001:db8::", "2001:db8::1"]),
    ],
)
def test_a_pool_is_addresses_ranges_and_cidrs_in_the_order_written(
    text: str, addresses: list[str]
) -> None:
    assert list(parse_address_pool(text).addresses()) == addresses


@pytest.mark.parametrize("text", ["", "foo", "192.0.2.9-192.0.2.1", "192.0.2.1-2001:db8::1"])
def test_an_invalid_pool_is_refused(text: str) -> None:
    with pytest.raises(Invalid):
        parse_address_pool(text)


# ------------------------------------------------------------------ status and routes


def two_gateways(**config: str) -> Any:
    """HTTPRouteMultipleGateways: two Gateways of one workload on port 80, no hostname,
    each with its own `PathPrefix /` route to another Service."""
    first = gateway("same", port=80, created="2026-01-01T00:00:00Z")
    second = gateway("all", port=80, created="2026-01-02T00:00:00Z")
    routes = (
        route("to-same", [prefix_rule("/", [to("shop")])], parent={"name": "same"}),
        route("to-all", [prefix_rule("/", [to("catalog")])], parent={"name": "all"}),
    )
    return state(first, second, *routes, config=settings(**config) if config else None)


def test_each_gateway_with_its_own_address_is_a_listener_of_its_own() -> None:
    table = compute_routes(two_gateways(**{"gateway-address-pool": POOL}), [WORKLOAD], 80, 10000)
    listeners = table.of(WORKLOAD).listeners
    assert [(li.port, li.address) for li in listeners] == [(80, "192.0.2.10"), (80, "192.0.2.11")]
    served = {li.address: [b.backend for r in li.rules for b in r.backends] for li in listeners}
    assert served == {"192.0.2.10": ["default_shop_http"], "192.0.2.11": ["default_catalog_http"]}
    assert not table.rejections  # no contest: each route serves its own Gateway's address
    statuses = route_statuses(two_gateways(**{"gateway-address-pool": POOL}))
    for name, address in (("same", "192.0.2.10"), ("all", "192.0.2.11")):
        body = statuses[StatusKey(GATEWAY_GROUP, "Gateway", "default", name)]
        assert body["addresses"] == [{"type": "IPAddress", "value": address}]
        programmed = next(c for c in body["conditions"] if c["type"] == "Programmed")
        assert programmed["status"] == "True" and address in programmed["message"]
    for name in ("to-same", "to-all"):
        parent = statuses[StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", name)]["parents"][0]
        assert all(c["status"] == "True" for c in parent["conditions"]), parent


def test_without_a_pool_the_two_gateways_share_the_port_and_one_route_wins() -> None:
    table = compute_routes(two_gateways(), [WORKLOAD], 80, 10000)
    (listener,) = table.of(WORKLOAD).listeners
    assert listener.address == ""
    assert any("same match" in r.reason for r in table.rejections)


def test_the_snapshot_carries_each_listeners_address_and_both_backends() -> None:
    result = compute(two_gateways(**{"gateway-address-pool": POOL}), {})
    (snapshot,) = result.workloads.values()
    assert [li.address for li in snapshot.http_listeners] == ["192.0.2.10", "192.0.2.11"]
    names = {b.name for b in snapshot.backends}
    assert {"default_shop_http", "default_catalog_http"} <= names


def test_a_gateway_whose_pool_address_is_taken_shares_the_workloads_and_says_why() -> None:
    pool = "192.0.2.10"
    statuses = route_statuses(two_gateways(**{"gateway-address-pool": pool}))
    body = statuses[StatusKey(GATEWAY_GROUP, "Gateway", "default", "all")]
    assert body["addresses"] == [
        {"type": "IPAddress", "value": "127.0.1.1"},
        {"type": "IPAddress", "value": "127.0.1.2"},
    ]
    programmed = next(c for c in body["conditions"] if c["type"] == "Programmed")
    assert programmed["status"] == "True"
    assert "gateway-address-pool has no free address" in programmed["message"]


def test_static_addresses_in_and_out_of_the_pool() -> None:
    """GatewayStaticAddresses: an unusable address keeps it not programmed, listing the
    usable one; without it, programmed with the usable address alone."""
    web = dataclasses.replace(gateway(), addresses=(ip("198.51.100.1"), ip("192.0.2.12")))
    config = settings(**{"gateway-address-pool": POOL})
    key = StatusKey(GATEWAY_GROUP, "Gateway", "default", "web")
    body = route_statuses(state(web, config=config))[key]
    assert body["addresses"] == [{"type": "IPAddress", "value": "192.0.2.12"}]
    reasons = {c["type"]: (c["status"], c["reason"]) for c in body["conditions"]}
    assert reasons["Programmed"] == ("False", "AddressNotUsable")
    usable = dataclasses.replace(web, addresses=(ip("192.0.2.12"),))
    body = route_statuses(state(usable, config=config))[key]
    assert body["addresses"] == [{"type": "IPAddress", "value": "192.0.2.12"}]
    reasons = {c["type"]: (c["status"], c["reason"]) for c in body["conditions"]}
    assert reasons["Programmed"] == ("True", "Programmed")


def test_own_address_dataclass_defaults_to_none() -> None:
    assert OwnAddress() == OwnAddress("", "")


def test_a_gateways_status_addresses_are_read_back_and_a_malformed_status_never_refuses_it() -> (
    None
):
    from controlplane.source.convert_gateway import gateway_from

    manifest: dict[str, Any] = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "gatewayClassName": "peerplane",
            "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}],
        },
        "status": {
            "addresses": [
                {"type": "IPAddress", "value": "192.0.2.10"},
                {"type": "Hostname", "value": "lb.example.com"},
                {"value": 7},
                "junk",
            ]
        },
    }
    assert gateway_from(manifest).status_addresses == (ip("192.0.2.10"),)
    manifest["status"] = "junk"
    assert gateway_from(manifest).status_addresses == ()


def test_a_haproxy_pods_address_in_the_pool_is_never_given() -> None:
    """The pods' every-address frontends bind it already: skipped, and a Gateway asking
    for it is told whose it is."""
    a = gw("a", "2026-01-01T00:00:00Z", status=("192.0.2.10",))
    b = gw("b", "2026-01-02T00:00:00Z", spec=("192.0.2.11",))
    found = own_addresses([a, b], parse_address_pool(POOL), {"192.0.2.10", "192.0.2.11"})
    assert found[("default", "a")].address == "192.0.2.12"
    assert found[("default", "b")].why_none == (
        "spec.addresses 192.0.2.11 is the address of a HAProxy pod"
    )
    table = compute_routes(
        two_gateways(**{"gateway-address-pool": "127.0.1.1-127.0.1.3"}), [WORKLOAD], 80, 10000
    )  # the default pods are 127.0.1.1 and 127.0.1.2
    assert [li.address for li in table.of(WORKLOAD).listeners] == ["", "127.0.1.3"]
