"""TLSRoutes and TCPRoutes (controlplane/routes/l4.py): SNI routes on passthrough listeners,
TCP frontends by listener port, their mode-tcp backends, and their statuses; asserted on
the snapshots compute returns and the status documents route_statuses gives."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.compute import Computer, WorkloadSnapshot, compute
from controlplane.model import (
    Gateway,
    GatewayListener,
    HTTPBackendRef,
    L4Rule,
    ParentRef,
    RouteGroupKind,
    TCPRoute,
    TLSRoute,
    frozen_map,
)
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.snapshot import SniRoute, TcpFrontend, WeightedBackend
from controlplane.source.convert_gateway import reference_grant_from
from peerplane import patterns
from tests.helpers.builders import WORKLOAD, service
from tests.helpers.route_builders import prefix_rule, route, state, to

GROUP = "gateway.networking.k8s.io"
OLD, NEW = "2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"


def listener(
    name: str = "tls", port: int = 8443, protocol: str = "TLS", **more: Any
) -> GatewayListener:
    mode = "Passthrough" if protocol == "TLS" else ""
    return GatewayListener(name, port, protocol, **{"tls_mode": mode, **more})


def gw(*listeners: GatewayListener, name: str = "edge", **more: Any) -> Gateway:
    return Gateway(
        "default", name, "peerplane", listeners or (listener(),), creation_timestamp=OLD, **more
    )


def ref(name: str, port: int = 443, weight: int = 1, namespace: str = "") -> HTTPBackendRef:
    return HTTPBackendRef(name, port=port, weight=weight, namespace=namespace)


def tls_route(
    name: str,
    *backends: HTTPBackendRef,
    hostnames: tuple[str, ...] = (),
    created: str = OLD,
    namespace: str = "default",
    parent: ParentRef | None = None,
) -> TLSRoute:
    return TLSRoute(
        namespace,
        name,
        (parent or ParentRef("edge", namespace="default"),),
        hostnames,
        (L4Rule(backends or (ref("shop"),)),),
        generation=3,
        creation_timestamp=created,
    )


def tcp_route(
    name: str, *rules: tuple[HTTPBackendRef, ...], created: str = OLD, section: str = ""
) -> TCPRoute:
    return TCPRoute(
        "default",
        name,
        (ParentRef("edge", namespace="default", section_name=section),),
        tuple(L4Rule(backends) for backends in rules) or (L4Rule((ref("db", 5432),)),),
        generation=2,
        creation_timestamp=created,
    )


SHOP = service("shop", expose=False, ports=(("https", 443), ("http", 80)))
DB = service("db", expose=False, ports=(("pg", 5432),))


def cluster(*objects: Any, services: tuple[Any, ...] = (SHOP, DB), **more: Any) -> Any:
    gateways = tuple(o for o in objects if isinstance(o, Gateway))
    rest = tuple(o for o in objects if not isinstance(o, Gateway | TLSRoute | TCPRoute))
    built = state(*rest, services=services, **more)
    return dataclasses.replace(
        built,
        gateways=(*built.gateways, *gateways),
        tls_routes=tuple(o for o in objects if isinstance(o, TLSRoute)),
        tcp_routes=tuple(o for o in objects if isinstance(o, TCPRoute)),
    )


def snapshot_of(cluster_state: Any) -> WorkloadSnapshot:
    return compute(cluster_state, {}).workloads[WORKLOAD]


def reasons(snapshot: WorkloadSnapshot) -> list[str]:
    return [f"{w.object} {w.key}: {w.reason}" for w in snapshot.warnings]


# ---------------------------------------------------------------- passthrough


def test_sni_routes_exact_names_before_wildcards_longer_first_then_older_route() -> None:
    got = snapshot_of(
        cluster(
            gw(),
            tls_route("old", hostnames=("*.example.com", "a.example.com")),
            tls_route(
                "new",
                ref("db", 5432),
                hostnames=("a.example.com", "b.example.com", "x.a.example.com"),
                created=NEW,
            ),
        )
    )
    (passthrough,) = got.tls_listeners
    assert passthrough.port == 8443 and not passthrough.accept_proxy
    assert [(r.hostnames, r.source) for r in passthrough.routes] == [
        (("x.a.example.com",), "TLSRoute default/new rule 0"),
        (("a.example.com",), "TLSRoute default/old rule 0"),
        (("b.example.com",), "TLSRoute default/new rule 0"),
        (("*.example.com",), "TLSRoute default/old rule 0"),
    ]
    assert passthrough.routes[1].backends == (WeightedBackend("default_shop_https", 1),)
    # The newer route's a.example.com lost to the older route's: reported, not served.
    assert reasons(got) == [
        "TLSRoute default/new spec.rules[0]: SNI name on port 8443 already routed by "
        "TLSRoute default/old rule 0, which takes precedence (older): dropped"
    ]


def test_route_hostnames_are_intersected_with_the_tls_listeners() -> None:
    got = snapshot_of(
        cluster(
            gw(listener(hostname="*.example.com")),
            tls_route("some", hostnames=("a.example.com", "b.example.org")),
            tls_route("any", ref("db", 5432), created=NEW),
        )
    )
    (passthrough,) = got.tls_listeners
    assert [(r.hostnames, r.source) for r in passthrough.routes] == [
        (("a.example.com",), "TLSRoute default/some rule 0"),
        (("*.example.com",), "TLSRoute default/any rule 0"),
    ]
    unmatched = cluster(
        gw(listener(hostname="*.example.com")), tls_route("off", hostnames=("b.example.org",))
    )
    assert snapshot_of(unmatched).tls_listeners[0].routes == ()
    (entry,) = route_statuses(unmatched)[StatusKey(GROUP, "TLSRoute", "default", "off")]["parents"]
    assert entry["conditions"][0]["reason"] == "NoMatchingListenerHostname"


def test_weighted_sni_backends_and_accept_proxy_from_the_gateway_annotation() -> None:
    notes = frozen_map({"peerplane.dev/accept-proxy-protocol": "true"})
    got = snapshot_of(
        cluster(
            gw(annotations=notes),
            tls_route("w", ref("shop", weight=3), ref("db", 5432, weight=1)),
        )
    )
    (passthrough,) = got.tls_listeners
    assert passthrough.accept_proxy
    assert passthrough.routes == (
        SniRoute(
            "TLSRoute default/w rule 0",
            (),
            (WeightedBackend("default_shop_https", 3), WeightedBackend("default_db_pg", 1)),
        ),
    )


# ---------------------------------------------------------------- TCP


def test_one_tcproute_per_tcp_listener_port_the_oldest_wins() -> None:
    got = snapshot_of(
        cluster(
            gw(listener("pg", 5432, "TCP")),
            tcp_route("older"),
            tcp_route("newer", (ref("shop"),), created=NEW),
        )
    )
    assert got.tcp_frontends == (
        TcpFrontend(5432, "default_db_pg", "TCPRoute default/older rule 0"),
    )
    assert [b.name for b in got.backends] == [
        "default_db_pg",
        "default_shop_http",
        "default_shop_https",
    ]
    assert reasons(got) == [
        "TCPRoute default/newer spec.rules[0]: port 5432 already routed by the older "
        "TCPRoute default/older rule 0: not served"
    ]


def test_a_tcp_frontend_serves_the_first_backend_weighted_above_zero_and_reports_the_rest() -> None:
    got = snapshot_of(
        cluster(
            gw(listener("pg", 5432, "TCP")),
            tcp_route("w", (ref("shop", weight=0), ref("db", 5432), ref("shop", 80))),
        )
    )
    assert got.tcp_frontends == (TcpFrontend(5432, "default_db_pg", "TCPRoute default/w rule 0"),)
    assert sorted(w.key for w in got.warnings) == [
        "spec.rules[0].backendRefs[0]",
        "spec.rules[0].backendRefs[2]",
    ]
    assert all("one backend (no weights)" in w.reason for w in got.warnings)


def test_a_tcp_listener_takes_its_port_from_a_tcp_port_annotation_service() -> None:
    annotated = service("legacy", annotations={"haproxy.org/tcp-port": "5432"})
    result = compute(
        cluster(gw(listener("pg", 5432, "TCP")), tcp_route("r"), services=(DB, annotated)), {}
    )
    got = result.workloads[WORKLOAD]
    assert got.tcp_frontends == (TcpFrontend(5432, "default_db_pg", "TCPRoute default/r rule 0"),)
    (lost,) = [w for w in result.rejections if w.kind == "Service"]
    assert (lost.key, lost.reason) == (
        "haproxy.org/tcp-port",
        "port already used by a Gateway or Ingress route listener",
    )


# ---------------------------------------------------------------- backends


def test_a_tlsroute_reached_service_is_a_mode_tcp_backend_as_a_tcp_port_service_is() -> None:
    notes = {
        "haproxy.org/load-balance": "source",
        "haproxy.org/source-ip-persistence": "true",
        "haproxy.org/source-ip-persistence-expire": "5m",
    }
    routed = service("shop", expose=False, annotations=notes, ports=(("https", 443),))
    got = snapshot_of(cluster(gw(), tls_route("r"), services=(routed,)))
    spec = got.backend("default_shop_https")
    annotated = service(
        "shop", annotations={**notes, "haproxy.org/tcp-port": "9443"}, ports=(("https", 443),)
    )
    reference = snapshot_of(cluster(services=(annotated,))).backend("default_shop_https")
    assert spec.mode == "tcp" and spec.balance == "source"
    assert spec.persistence is not None and spec.persistence.expire_ms == 300_000
    assert dataclasses.replace(spec, warnings=()) == dataclasses.replace(reference, warnings=())


def test_a_service_port_reached_in_http_and_tcp_keeps_http_and_the_tcp_reference_closes() -> None:
    got = snapshot_of(
        cluster(
            gw(),
            route("web", [prefix_rule("/", [to("shop", 443)])], parent={"name": "edge-http"}),
            tls_route("r", ref("shop", 443), ref("shop", 80, weight=0)),
            gw(listener("http", 8080, "HTTP"), name="edge-http"),
        )
    )
    assert got.backend("default_shop_https").mode == "http"
    assert got.backend("default_shop_http").mode == "tcp"  # only the TLSRoute reaches :80
    (passthrough,) = got.tls_listeners
    assert passthrough.routes[0].backends == (
        WeightedBackend("", 1),
        WeightedBackend("default_shop_http", 0),
    )
    (closed,) = [w for w in got.warnings if w.kind == "TLSRoute"]
    assert closed.value == "default_shop_https" and closed.reason.endswith(
        "its connections are closed"
    )


def test_a_tcproute_to_a_port_http_keeps_leaves_its_port_unbound() -> None:
    got = snapshot_of(
        cluster(
            gw(listener("pg", 5432, "TCP"), listener("http", 8080, "HTTP")),
            route("web", [prefix_rule("/", [to("shop", 80)])], parent={"name": "edge"}),
            tcp_route("r", (ref("shop", 80),)),
        )
    )
    assert got.backend("default_shop_http").mode == "http"
    assert got.tcp_frontends == ()
    assert [h.port for h in got.http_listeners] == [8080]
    (refused,) = [w for w in got.warnings if w.kind == "TCPRoute"]
    assert refused.value == "default_shop_http"
    assert refused.reason.endswith(
        "the port is not served (no frontend without a backend: connections refused)"
    )


def test_cross_namespace_backend_needs_a_reference_grant() -> None:
    other = dataclasses.replace(DB, namespace="data")
    shared = cluster(
        gw(listener("pg", 5432, "TCP")),
        tcp_route("r", (ref("db", 5432, namespace="data"),)),
        services=(other,),
    )
    got = snapshot_of(shared)
    assert got.tcp_frontends == ()  # no frontend without a backend: the port is not bound
    (refused,) = [w for w in got.warnings if w.kind == "TCPRoute"]
    assert refused.key == "spec.rules[0].backendRefs[0]"
    assert refused.reason.startswith("no ReferenceGrant in data lets TCPRoutes of default")
    assert refused.reason.endswith(
        "the port is not served (no frontend without a backend: connections refused)"
    )
    (entry,) = route_statuses(shared)[StatusKey(GROUP, "TCPRoute", "default", "r")]["parents"]
    assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [
        ("Accepted", "True", "Accepted"),
        ("ResolvedRefs", "False", "RefNotPermitted"),
    ]
    grant = reference_grant_from(
        {
            "metadata": {"name": "tcp-in", "namespace": "data"},
            "spec": {
                "from": [{"group": GROUP, "kind": "TCPRoute", "namespace": "default"}],
                "to": [{"group": "", "kind": "Service"}],
            },
        }
    )
    granted = dataclasses.replace(shared, reference_grants=(grant,))
    assert snapshot_of(granted).tcp_frontends == (
        TcpFrontend(5432, "data_db_pg", "TCPRoute default/r rule 0"),
    )
    assert snapshot_of(granted).backend("data_db_pg").mode == "tcp"


# ---------------------------------------------------------------- listeners and statuses


def _listeners(cluster_state: Any, gateway: str = "edge") -> dict[str, dict[str, Any]]:
    body = route_statuses(cluster_state)[StatusKey(GROUP, "Gateway", "default", gateway)]
    return {item["name"]: item for item in body["listeners"]}


def _conditions(item: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in item["conditions"]}


def test_listener_statuses_per_protocol_and_attached_routes() -> None:
    found = _listeners(
        cluster(
            gw(
                listener(),
                listener("pg", 5432, "TCP"),
                listener("term", 9443, "TLS", tls_mode="Terminate"),
                listener("bare", 9444, "TLS", tls_mode=""),
                listener("udp", 53, "UDP"),
                listener("kinds", 9445, allowed_kinds=(RouteGroupKind(GROUP, "HTTPRoute"),)),
            ),
            tls_route("a"),
            tls_route("b", hostnames=("b.example.com",)),
            tcp_route("t", section="pg"),
        )
    )
    assert _conditions(found["tls"])["Accepted"] == ("True", "Accepted")
    assert found["tls"]["attachedRoutes"] == 2
    assert found["tls"]["supportedKinds"] == [{"group": GROUP, "kind": "TLSRoute"}]
    assert found["pg"]["attachedRoutes"] == 1
    assert found["pg"]["supportedKinds"] == [{"group": GROUP, "kind": "TCPRoute"}]
    for name in ("term", "bare", "udp"):
        assert _conditions(found[name])["Accepted"] == ("False", "UnsupportedProtocol")
    assert _conditions(found["kinds"])["ResolvedRefs"] == ("False", "InvalidRouteKinds")
    assert found["kinds"]["supportedKinds"] == []


def test_http_and_tls_listeners_on_one_port_are_conflicted_and_not_served() -> None:
    mixed = cluster(
        gw(listener(), listener("web", 8443, "HTTP"), listener("other", 8444)),
        tls_route("r"),
    )
    found = _listeners(mixed)
    for name in ("tls", "web"):
        conditions = _conditions(found[name])
        assert conditions["Conflicted"] == ("True", "ProtocolConflict")
        assert conditions["Programmed"] == ("False", "Invalid")
    assert _conditions(found["other"])["Conflicted"] == ("False", "NoConflicts")
    got = snapshot_of(mixed)
    assert [t.port for t in got.tls_listeners] == [8444]
    assert got.http_listeners == ()


def test_tls_listener_on_a_port_another_gateway_serves_in_http_is_not_served() -> None:
    got = snapshot_of(
        cluster(
            gw(listener(port=8080)),
            gw(listener("http", 8080, "HTTP"), name="web"),
            tls_route("r"),
        )
    )
    assert got.tls_listeners == () and [h.port for h in got.http_listeners] == [8080]
    (lost,) = [w for w in got.warnings if w.kind == "Gateway"]
    assert (lost.object, lost.key) == ("Gateway default/edge", "spec.listeners[0]")
    assert "served in HTTP" in lost.reason


def test_tlsroute_status_accepted_resolved_and_observed_generation() -> None:
    statuses = route_statuses(
        cluster(gw(), tls_route("ok"), tls_route("gone", ref("missing"), created=NEW))
    )
    (ok,) = statuses[StatusKey(GROUP, "TLSRoute", "default", "ok")]["parents"]
    assert ok["parentRef"] == {
        "group": GROUP,
        "kind": "Gateway",
        "name": "edge",
        "namespace": "default",
    }
    assert ok["controllerName"] == "peerplane.dev/gateway-controller"
    assert [(c["type"], c["status"], c["observedGeneration"]) for c in ok["conditions"]] == [
        ("Accepted", "True", 3),
        ("ResolvedRefs", "True", 3),
    ]
    (gone,) = statuses[StatusKey(GROUP, "TLSRoute", "default", "gone")]["parents"]
    assert _conditions(gone)["ResolvedRefs"] == ("False", "BackendNotFound")
    # An HTTPRoute does not attach to a TLS listener.
    http = route_statuses(
        cluster(gw(), route("web", [prefix_rule("/", [to("shop")])], parent={"name": "edge"}))
    )
    (entry,) = http[StatusKey(GROUP, "HTTPRoute", "default", "web")]["parents"]
    assert _conditions(entry)["Accepted"] == ("False", "NotAllowedByListeners")


# ---------------------------------------------------------------- incremental


def test_a_tlsroute_change_recomputes_the_table_and_matches_a_fresh_computation() -> None:
    computer = Computer()
    first = cluster(
        gw(), tls_route("r"), tls_route("s", ref("db", 5432), hostnames=("s.example.com",))
    )
    computer.compute(first, {})
    before = computer._routes.computed
    changed = dataclasses.replace(
        first,
        tls_routes=(
            first.tls_routes[0],
            tls_route("s", ref("db", 5432), hostnames=("t.example.com",)),
        ),
    )
    got = computer.compute(changed, {})
    assert computer._routes.computed == before + 1
    assert got.workloads == compute(changed, {}).workloads
    # An endpoint-only change does not compute the table again.
    computer.compute(dataclasses.replace(changed, endpoint_slices=()), {})
    assert computer._routes.computed == before + 1


# ---------------------------------------------------------------- properties

NAMES = ["a.example.com", "b.example.com", "*.example.com", "x.a.example.com", "*.a.example.com"]
HOSTILE = ["A.example.com", "a\nb", "*", "é.example.com", "", "a.example.com."]
HOSTS = st.sampled_from([*NAMES, *HOSTILE])


@st.composite
def tls_routes(draw: st.DrawFn) -> list[TLSRoute]:
    found = []
    for index in range(draw(st.integers(1, 6))):
        found.append(
            tls_route(
                f"r{index}",
                *draw(
                    st.lists(
                        st.sampled_from(
                            [ref("shop"), ref("db", 5432), ref("missing"), ref("shop", 80)]
                        ),
                        min_size=1,
                        max_size=3,
                    )
                ),
                hostnames=tuple(draw(st.lists(HOSTS, max_size=3))),
                created=draw(st.sampled_from([OLD, NEW])),
            )
        )
    return found


def _rank(route: SniRoute) -> tuple[bool, bool, int]:
    host = route.hostnames[0] if route.hostnames else ""
    return (not host, host.startswith("*."), -len(host))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(routes=tls_routes(), seed=st.integers(0, 1000))
def test_sni_routes_are_valid_unique_ordered_and_independent_of_input_order(
    routes: list[TLSRoute], seed: int
) -> None:
    listeners = (listener(), listener("wild", 8443, hostname="*.example.com"))
    got = snapshot_of(cluster(gw(*listeners), *routes))
    shuffled = list(routes)
    random.Random(seed).shuffle(shuffled)
    assert snapshot_of(cluster(gw(*listeners), *shuffled)) == got
    for passthrough in got.tls_listeners:
        hosts = [r.hostnames for r in passthrough.routes]
        assert len(hosts) == len(set(hosts))
        assert all(patterns.is_route_host(h) for r in passthrough.routes for h in r.hostnames)
        assert [_rank(r) for r in passthrough.routes] == sorted(map(_rank, passthrough.routes))
        names = {b.backend for r in passthrough.routes for b in r.backends} - {""}
        assert all(got.backend(name).mode == "tcp" for name in names)
    # One Computer through every prefix of the routes gives what a fresh one gives.
    computer = Computer()
    for end in range(1, len(routes) + 1):
        step = cluster(gw(*listeners), *routes[:end])
        assert computer.compute(step, {}).workloads == compute(step, {}).workloads


# ---------------------------------------------------------------- SNI names of tenants


def test_another_namespaces_tls_route_cannot_take_an_sni_name_an_older_listener_holds() -> None:
    """R1 for passthrough: tenant B's Gateway without hostname on the victim's TLS port
    and a TLSRoute for store.demo.example.com, an exact name that outranked the victim's
    `*.demo.example.com`; the victim's listener is older, so B's name is dropped
    (controlplane/routes/ownership.py) and a TLS listener of B for that very name is
    Conflicted."""
    victim = gw(listener(hostname="*.demo.example.com"))
    mine = tls_route("store")  # every name under the listener's wildcard
    theirs = Gateway("tenant-b", "bgw", "peerplane", (listener(),), creation_timestamp=NEW)
    steal = tls_route(
        "steal",
        ref("bsvc"),
        hostnames=("store.demo.example.com",),
        created=NEW,
        namespace="tenant-b",
        parent=ParentRef("bgw", namespace="tenant-b"),
    )
    bsvc = service("bsvc", namespace="tenant-b", expose=False, ports=(("https", 443),))
    got = snapshot_of(cluster(victim, mine, theirs, steal, services=(SHOP, DB, bsvc)))
    (passthrough,) = got.tls_listeners
    assert [(r.source, r.hostnames) for r in passthrough.routes] == [
        ("TLSRoute default/store rule 0", ("*.demo.example.com",))
    ]
    assert any(
        w.startswith("TLSRoute tenant-b/steal")
        and "held by the older Gateway default/edge listener tls" in w
        for w in reasons(got)
    ), reasons(got)
    named = Gateway(
        "tenant-b",
        "bgw",
        "peerplane",
        (listener(hostname="store.demo.example.com"),),
        creation_timestamp=NEW,
    )
    found = route_statuses(cluster(victim, mine, named, steal, services=(SHOP, DB, bsvc)))
    body = found[StatusKey(GROUP, "Gateway", "tenant-b", "bgw")]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in body["listeners"][0]["conditions"]}
    assert conditions["Conflicted"] == ("True", "HostnameConflict")


def test_an_http_listener_of_another_namespace_cannot_cut_an_older_tls_port() -> None:
    """Before, a TLS listener on a port the workload served in HTTP was dropped whoever
    was first: tenant B's newer HTTP Gateway on the victim's passthrough port cut it."""
    plain = Gateway(
        "tenant-b",
        "bgw",
        "peerplane",
        (GatewayListener("http", 8443, "HTTP"),),
        creation_timestamp=NEW,
    )
    cluster_state = cluster(gw(), tls_route("r"), plain)
    got = snapshot_of(cluster_state)
    assert [t.port for t in got.tls_listeners] == [8443]
    assert got.http_listeners == ()
    body = route_statuses(cluster_state)[StatusKey(GROUP, "Gateway", "tenant-b", "bgw")]
    conditions = {c["type"]: c for c in body["listeners"][0]["conditions"]}
    assert (conditions["Conflicted"]["status"], conditions["Conflicted"]["reason"]) == (
        "True",
        "ProtocolConflict",
    )
    assert (
        "served in TLS by the older TLS default/edge listener tls"
        in (conditions["Conflicted"]["message"])
    )
