"""The route model's listeners on the wire: Snapshot field 14 byte for byte, sent with the
frontends in a delta (frontends_changed), and a delta applied to the old snapshot hashes
as the new full snapshot does."""

from __future__ import annotations

import dataclasses

from controlplane.compute import Computer
from controlplane.model import ClusterState
from controlplane.publish import Encoder
from controlplane.publish.content import SnapshotContent
from controlplane.publish.delta import delta_bytes
from controlplane.snapshot import (
    HeaderChanges,
    HttpListener,
    Redirect,
    RoutePath,
    RouteRule,
    WeightedBackend,
)
from controlplane.source.convert_gateway import gateway_class_from, gateway_from
from controlplane.source.convert_routes import http_route_from
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.delta_agent import apply_delta

CLASS = gateway_class_from(
    {"metadata": {"name": "p"}, "spec": {"controllerName": "peerplane.dev/gateway-controller"}}
)
GATEWAY = gateway_from(
    {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "gatewayClassName": "p",
            "listeners": [{"name": "http", "port": 8080, "protocol": "HTTP"}],
        },
    }
)


def route(path: str, backend: str = "shop") -> object:
    return http_route_from(
        {
            "metadata": {"name": "r", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "web"}],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": path}}],
                        "backendRefs": [{"name": backend, "port": 80}],
                    }
                ],
            },
        }
    )


def state(path: str, endpoints: tuple[str, ...] = ("10.0.0.1",)) -> ClusterState:
    base = cluster(
        services=[service("shop"), service("catalog")],
        slices=[endpoint_slice("shop", endpoints)],
        pods=DEFAULT_PODS,
    )
    return dataclasses.replace(
        base, gateway_classes=(CLASS,), gateways=(GATEWAY,), http_routes=(route(path),)
    )


def test_every_rule_field_is_encoded_as_the_contract_says() -> None:
    rule = RouteRule(
        source="HTTPRoute default/r rule 0 match 0",
        hostnames=("a.example.com",),
        path=RoutePath("Exact", "/x"),
        method="GET",
        headers=(("x-a", "1"),),
        query_params=(("q", "2"),),
        backends=(WeightedBackend("default_shop_http", 3), WeightedBackend("", 1)),
        filters=(HeaderChanges(set=(("x-s", "1"),), add=(("x-d", "2"),), remove=("x-r",)),),
    )
    redirect = RouteRule(
        "Ingress default/i rule 0 path 0",
        (),
        RoutePath("PathPrefix", "/old"),
        filters=(Redirect("https", "b.example.com", 8443, 301, "/new"),),
    )
    computer = Computer()
    snapshot = computer.compute(state("/"), {}).workloads[WORKLOAD]
    snapshot = dataclasses.replace(
        snapshot, http_listeners=(HttpListener(8080, (rule, redirect), "default_shop_http"),)
    )
    content = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
    message = content.message()
    # Contract 2: the listener carries no rules, they travel grouped by host.
    assert list(message.http_listeners) == [
        pb.HttpListener(port=8080, default_backend="default_shop_http")
    ]
    expected = pb.HttpListener(port=8080, default_backend="default_shop_http")
    expected.rules.add(
        source=rule.source,
        hostnames=["a.example.com"],
        path=pb.PathMatch(type=pb.PathMatch.EXACT, value="/x"),
        method="GET",
        headers=[pb.NameValue(name="x-a", value="1")],
        query_params=[pb.NameValue(name="q", value="2")],
        backends=[
            pb.WeightedBackend(backend="default_shop_http", weight=3),
            pb.WeightedBackend(backend="", weight=1),
        ],
        request_headers=pb.HeaderModifier(
            set=[pb.NameValue(name="x-s", value="1")],
            add=[pb.NameValue(name="x-d", value="2")],
            remove=["x-r"],
        ),
    )
    expected.rules.add(
        source=redirect.source,
        path=pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value="/old"),
        redirect=pb.Redirect(
            scheme="https",
            hostname="b.example.com",
            port=8443,
            status_code=301,
            replace_full_path="/new",
        ),
    )
    rules = expected.rules
    assert list(message.route_groups) == [
        pb.RouteGroup(listener="8080", host="", rules=[rules[1]]),
        pb.RouteGroup(listener="8080", host="a.example.com", rules=[rules[0]]),
    ]
    # The payload is the message's deterministic serialization, field 18 last.
    message.ClearField("version")
    message.ClearField("content_hash")
    assert content.payload == message.SerializeToString(deterministic=True)
    assert SnapshotContent.from_message(message).content_hash == content.content_hash


def test_a_changed_rule_is_encoded_alone_and_the_listener_bytes_match_a_fresh_encoding() -> None:
    """Rule bytes are kept by the rule object's identity: with thousands of routes, one
    route's change encodes its own rules, and the joined bytes are what a fresh encoder
    (and the message's deterministic serialization) makes."""
    computer = Computer()
    snapshot = computer.compute(state("/"), {}).workloads[WORKLOAD]
    rules = tuple(
        RouteRule(f"HTTPRoute default/r{i} rule 0 match 0", (f"h{i}.example",), None)
        for i in range(20)
    )
    first = dataclasses.replace(snapshot, http_listeners=(HttpListener(8080, rules),))
    encoder = Encoder()
    encoder.encode({WORKLOAD: first})
    assert encoder.encoded_rules == 20
    changed = (*rules[:7], dataclasses.replace(rules[7], hostnames=("x.example",)), *rules[8:])
    second = dataclasses.replace(first, http_listeners=(HttpListener(8080, changed, "b"),))
    content = encoder.encode({WORKLOAD: second})[WORKLOAD]
    assert encoder.encoded_rules == 1
    assert content.payload == Encoder().encode({WORKLOAD: second})[WORKLOAD].payload
    message = content.message()
    message.ClearField("version")
    message.ClearField("content_hash")
    assert content.payload == message.SerializeToString(deterministic=True)


def test_a_route_change_is_a_route_group_delta_that_rebuilds_the_full_snapshot() -> None:
    computer, encoder = Computer(), Encoder()
    first = computer.compute(state("/a"), {})
    old = encoder.encode(first.workloads)[WORKLOAD]
    second = computer.compute(state("/b"), first.assignment)
    new = encoder.encode(second.workloads)[WORKLOAD]
    raw = delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, 2)
    delta = pb.SnapshotDelta.FromString(raw)
    # Contract 2: only the route group of the changed host travels, not the listener.
    assert not delta.frontends_changed and not delta.warnings_changed
    assert not delta.peers_changed
    assert list(delta.backends) == [] and list(delta.removed_backends) == []
    assert [[r.path.value for r in g.rules] for g in delta.route_groups] == [["/b"]]
    assert list(delta.http_listeners) == [] and list(delta.removed_route_groups) == []
    held = old.message(1)
    rebuilt = apply_delta(held, delta)
    assert rebuilt.content_hash == new.content_hash
    assert rebuilt == new.message(2)


def test_an_endpoint_change_reuses_the_listeners_bytes_and_sends_no_frontends() -> None:
    computer, encoder = Computer(), Encoder()
    first = computer.compute(state("/a"), {})
    old = encoder.encode(first.workloads)[WORKLOAD]
    second = computer.compute(state("/a", ("10.0.0.1", "10.0.0.2")), first.assignment)
    new = encoder.encode(second.workloads)[WORKLOAD]
    assert new.parts.listeners is old.parts.listeners and new.parts.listeners
    delta = pb.SnapshotDelta.FromString(
        delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, 2)
    )
    assert not delta.frontends_changed and list(delta.http_listeners) == []
    assert [b.name for b in delta.backends] == ["default_shop_http"]
    assert apply_delta(old.message(1), delta).content_hash == new.content_hash


def test_removing_the_last_route_clears_the_listeners() -> None:
    computer, encoder = Computer(), Encoder()
    first = computer.compute(state("/a"), {})
    old = encoder.encode(first.workloads)[WORKLOAD]
    empty = dataclasses.replace(state("/a"), http_routes=(), gateways=())
    new = encoder.encode(computer.compute(empty, first.assignment).workloads)[WORKLOAD]
    delta = pb.SnapshotDelta.FromString(
        delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, 2)
    )
    assert delta.frontends_changed and list(delta.http_listeners) == []
    assert list(apply_delta(old.message(1), delta).http_listeners) == []


def test_route_groups_are_in_key_order_whatever_the_listeners_order() -> None:
    """Groups are sorted by "<listener>/<host>" as the agent sorts them: a listener named
    "80.1.2.3:443" sorts before "80" ("." before "/"), hosts in order within one."""
    computer = Computer()
    snapshot = computer.compute(state("/"), {}).workloads[WORKLOAD]

    def rules(*hosts: str) -> tuple[RouteRule, ...]:
        return tuple(
            RouteRule(f"HTTPRoute default/r{i} rule 0 match 0", (h,) if h else (), None)
            for i, h in enumerate(hosts)
        )

    listeners = (
        HttpListener(80, rules("b.example", "", "a.example", "b.example")),
        HttpListener(443, rules("c.example"), address="80.1.2.3"),
    )
    content = Encoder().encode({WORKLOAD: dataclasses.replace(snapshot, http_listeners=listeners)})
    keys = list(content[WORKLOAD].parts.route_groups)
    assert keys == ["80.1.2.3:443/c.example", "80/", "80/a.example", "80/b.example"]
    assert keys == sorted(keys)
    message = content[WORKLOAD].message()
    assert [r.source for r in message.route_groups[3].rules] == [
        "HTTPRoute default/r0 rule 0 match 0",
        "HTTPRoute default/r3 rule 0 match 0",
    ]
    assert SnapshotContent.from_message(message).content_hash == content[WORKLOAD].content_hash


def test_the_rule_cache_keeps_only_the_current_rules_over_many_route_changes() -> None:
    """A route change's old rules leave the cache with their group (issue 33: at 10,000
    routes the replaced rules stayed until the cache doubled, hours of route changes)."""
    computer = Computer()
    snapshot = computer.compute(state("/"), {}).workloads[WORKLOAD]
    rules = [
        RouteRule(f"HTTPRoute default/r{i} rule 0 match 0", (f"h{i}.example",), None)
        for i in range(20)
    ]
    encoder = Encoder()
    first = HttpListener(8080, tuple(rules))
    encoder.encode({WORKLOAD: dataclasses.replace(snapshot, http_listeners=(first,))})
    sizes = []
    for change in range(200):
        index = change % len(rules)
        method = "" if rules[index].method else "GET"
        rules[index] = dataclasses.replace(rules[index], method=method)
        listener = HttpListener(8080, tuple(rules))
        encoder.encode({WORKLOAD: dataclasses.replace(snapshot, http_listeners=(listener,))})
        assert encoder.encoded_rules == 1
        sizes.append(encoder.cached_rules)
    assert max(sizes) == len(rules)
