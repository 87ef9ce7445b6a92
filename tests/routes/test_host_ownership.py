"""Hostname ownership on a shared port (controlplane/routes/ownership.py): no namespace
takes the requests for a hostname another namespace's older listener, route or Ingress
already serves there, whatever the precedence of its rules; and the settings'
`gateway-namespaces` decides whose Gateways are accepted."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compute import WorkloadSnapshot, compute
from controlplane.model import GATEWAY_GROUP, ClusterState
from controlplane.routes.ownership import (
    ANY_HOST,
    Claim,
    Holding,
    covers,
    resolve,
    wider,
)
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.snapshot import HttpListener
from controlplane.source.convert_gateway import namespace_from
from peerplane.patterns import host_matches
from tests.helpers.builders import WORKLOAD, service
from tests.helpers.builders import settings as configmap
from tests.helpers.listener_isolation import (
    expected_answers,
    isolation_gateway,
    isolation_routes,
)
from tests.helpers.route_builders import gateway, ingress, path, prefix_rule, route, state, to
from tests.helpers.tenants import (
    HOST,
    NEW,
    OLD,
    PORT,
    SERVICES,
    TENANT_BACKEND,
    VICTIM_BACKEND,
    tenant_gateway,
    tenant_ingress,
    victim,
)


def tenants(*objects: Any, **more: Any) -> ClusterState:
    config = more.pop("config", configmap(**{"http-port": str(PORT)}))
    return state(*objects, services=SERVICES, config=config, **more)


def snapshot_of(cluster_state: ClusterState) -> WorkloadSnapshot:
    return compute(cluster_state, {}).workloads[WORKLOAD]


def listener_of(snapshot: WorkloadSnapshot, port: int = PORT) -> HttpListener:
    (listener,) = [lst for lst in snapshot.http_listeners if lst.port == port]
    return listener


def backends(listener: HttpListener) -> set[str]:
    return {b.backend for rule in listener.rules for b in rule.backends}


def warnings(snapshot: WorkloadSnapshot) -> list[str]:
    return [f"{w.object} {w.key}: {w.reason}" for w in snapshot.warnings]


def listener_conditions(cluster_state: ClusterState, namespace: str, name: str) -> dict[str, Any]:
    body = route_statuses(cluster_state)[StatusKey(GATEWAY_GROUP, "Gateway", namespace, name)]
    (listener,) = body["listeners"]
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in listener["conditions"]}


# ---------------------------------------------------------------- the finding


def test_a_catch_all_gateway_of_another_namespace_cannot_take_the_victims_host() -> None:
    got = snapshot_of(tenants(*victim(), *tenant_gateway()))
    listener = listener_of(got)
    assert backends(listener) == {VICTIM_BACKEND}
    # The victim's wildcard is closed: a miss on it is a 404, not tenant B's catch-all.
    assert listener.closed_hosts == ("*.demo.example.com",)
    told = warnings(got)
    route_status = route_statuses(tenants(*victim(), *tenant_gateway()))
    (parent,) = route_status[StatusKey(GATEWAY_GROUP, "HTTPRoute", "tenant-b", "steal")]["parents"]
    accepted = {c["type"]: c for c in parent["conditions"]}["Accepted"]
    assert (accepted["status"], accepted["reason"]) == ("False", "HostnameConflict")
    assert f"hostname {HOST} on port {PORT} is held by the older HTTPRoute" in accepted["message"]
    assert any(
        w.startswith("HTTPRoute tenant-b/steal")
        and f"hostname {HOST} on port {PORT} is held by the older HTTPRoute default/store "
        f"on Gateway default/web listener http (namespace default, {HOST}): dropped"
        in w
        for w in told
    ), told


def test_a_gateway_listener_under_an_older_wildcard_of_another_namespace_is_conflicted() -> None:
    cluster_state = tenants(*victim(), *tenant_gateway(hostname=HOST))
    assert backends(listener_of(snapshot_of(cluster_state))) == {VICTIM_BACKEND}
    conditions = listener_conditions(cluster_state, "tenant-b", "bgw")
    status, reason, message = conditions["Conflicted"]
    assert (status, reason) == ("True", "HostnameConflict")
    assert "held by the older Gateway default/web listener http" in message
    assert conditions["Programmed"][0] == "False"
    route_status = route_statuses(cluster_state)[
        StatusKey(GATEWAY_GROUP, "HTTPRoute", "tenant-b", "steal")
    ]
    (parent,) = route_status["parents"]
    accepted = {c["type"]: c for c in parent["conditions"]}["Accepted"]
    assert accepted["status"] == "False"
    assert "held by the older Gateway default/web" in accepted["message"]
    # The victim's own listener stays as it was.
    assert listener_conditions(cluster_state, "default", "web")["Conflicted"][0] == "False"


def test_an_ingress_of_another_namespace_cannot_take_the_victims_host() -> None:
    got = snapshot_of(tenants(*victim(), tenant_ingress()))
    assert backends(listener_of(got)) == {VICTIM_BACKEND}
    assert any(
        w.startswith("Ingress tenant-b/steal") and "held by the older HTTPRoute default/store" in w
        for w in warnings(got)
    ), warnings(got)


def test_the_older_holder_keeps_the_host_whichever_kind_comes_first() -> None:
    """Tenant B's Ingress older than the victim's Gateway: B keeps the host and the
    victim's route is refused for it (age decides, not the kind or the precedence)."""
    old_ingress = ingress(
        "first",
        [{"host": HOST, "http": {"paths": [path("/", "Prefix", svc="bsvc")]}}],
        namespace="tenant-b",
        created="2025-12-01T00:00:00Z",
    )
    got = snapshot_of(tenants(*victim(), old_ingress))
    assert backends(listener_of(got)) == {TENANT_BACKEND}
    assert any(
        w.startswith("HTTPRoute default/store") and "held by the older Ingress tenant-b/first" in w
        for w in warnings(got)
    ), warnings(got)
    # The victim keeps the rest of its wildcard, closed at B's host.
    assert listener_of(got).closed_hosts == (HOST,)


def test_one_namespace_shares_its_hostnames_across_its_gateways_and_ingresses() -> None:
    """Within a namespace nothing changes: two Gateways on one port and hostname and an
    Ingress for a host under them all serve, by precedence as before."""
    second = gateway("web2", port=PORT, hostname="*.demo.example.com", created=NEW)
    exact = route(
        "exact",
        [
            {
                "matches": [{"path": {"type": "Exact", "value": "/cart"}}],
                "backendRefs": [to("catalog")],
            }
        ],
        hostnames=(HOST,),
        created=NEW,
        parent={"name": "web2"},
    )
    same_ns_ingress = ingress(
        "more", [{"host": HOST, "http": {"paths": [path("/more", "Prefix")]}}], created=NEW
    )
    cluster_state = state(
        *victim(),
        second,
        exact,
        same_ns_ingress,
        config=configmap(**{"http-port": str(PORT)}),
    )
    got = snapshot_of(cluster_state)
    listener = listener_of(got)
    assert listener.rules[0].source == "HTTPRoute default/exact rule 0 match 0"
    assert backends(listener) == {"default_catalog_http", VICTIM_BACKEND}
    assert listener.closed_hosts == ()
    assert not [w for w in warnings(got) if "held by" in w]


def test_a_younger_wildcard_of_another_namespace_gets_the_rest_but_not_the_held_host() -> None:
    """An older exact listener of tenant B and a younger wildcard of the victim: both are
    served, requests for B's host never fall through to the victim's wildcard rules."""
    older = (
        gateway(
            "bgw", namespace="tenant-b", port=PORT, hostname=HOST, created="2025-01-01T00:00:00Z"
        ),
        route(
            "mine",
            [prefix_rule("/b", [to("bsvc")])],
            namespace="tenant-b",
            created="2025-01-01T00:00:00Z",
            parent={"name": "bgw"},
        ),
    )
    wildcard = route("all", [prefix_rule("/", [to("shop")])], created=OLD)
    got = snapshot_of(tenants(victim()[0], wildcard, *older))
    listener = listener_of(got)
    assert backends(listener) == {VICTIM_BACKEND, TENANT_BACKEND}
    assert listener.closed_hosts == (HOST,)


def test_an_ingress_default_backend_of_another_namespace_yields_to_an_older_catch_all() -> None:
    catch_all = gateway("any", port=PORT, created=OLD)
    default = ingress(
        "fallback",
        [],
        namespace="tenant-b",
        created=NEW,
        defaultBackend={"service": {"name": "bsvc", "port": {"number": 80}}},
    )
    got = snapshot_of(tenants(catch_all, default))
    assert listener_of(got).default_backend == ""
    assert any(
        w.startswith("Ingress tenant-b/fallback spec.defaultBackend")
        and "held by the older Gateway default/any" in w
        for w in warnings(got)
    ), warnings(got)


# ---------------------------------------------------------------- the rule itself


def claim(host: str, namespace: str, age: str) -> Claim:
    return Claim(age, namespace, f"{namespace} {host}", host)


@pytest.mark.parametrize(
    ("older", "newer", "refused"),
    [
        (("*.x.com", "a"), ("s.x.com", "b"), True),  # under an older wildcard
        (("*.x.com", "a"), ("*.s.x.com", "b"), True),  # a narrower wildcard too
        (("s.x.com", "a"), ("s.x.com", "b"), True),  # the same host
        (("", "a"), ("", "b"), True),  # any host: one holder
        (("s.x.com", "a"), ("*.x.com", "b"), False),  # a wider wildcard: the rest of it
        (("", "a"), ("s.x.com", "b"), False),  # any host covers no named host
        (("*.x.com", "a"), ("", "b"), False),
        (("*.x.com", "a"), ("s.x.com", "a"), False),  # one namespace shares
    ],
)
def test_an_older_claim_of_another_namespace_refuses_what_it_covers(
    older: tuple[str, str], newer: tuple[str, str], refused: bool
) -> None:
    first, second = claim(*older, OLD), claim(*newer, NEW)
    holding = resolve([second, first])
    assert (second in holding.refused) is refused
    assert first not in holding.refused


def test_the_tie_between_equal_timestamps_goes_to_the_namespace_name_first() -> None:
    holding = resolve([claim("s.x.com", "b", OLD), claim("s.x.com", "a", OLD)])
    assert holding.holders["s.x.com"].namespace == "a"


# ---------------------------------------------------------------- gateway-namespaces


def labelled(name: str, **labels: str) -> Any:
    return namespace_from({"metadata": {"name": name, "labels": labels}})


@pytest.mark.parametrize(
    ("selector", "accepted"),
    [
        (None, {"default": True, "tenant-b": True}),  # the default: every namespace
        ("peerplane.dev/gateways=allowed", {"default": True, "tenant-b": False}),
        ("team notin (b)", {"default": True, "tenant-b": False}),
        ("not a selector (", {"default": False, "tenant-b": False}),  # fails closed
    ],
)
def test_gateway_namespaces_selects_whose_gateways_are_accepted(
    selector: str | None, accepted: dict[str, bool]
) -> None:
    data = {"http-port": str(PORT)}
    if selector is not None:
        data["gateway-namespaces"] = selector
    cluster_state = tenants(
        *victim(),
        gateway("bgw", namespace="tenant-b", port=9090, created=NEW),
        route("r", [prefix_rule("/", [to("bsvc")])], namespace="tenant-b", parent={"name": "bgw"}),
        config=configmap(**data),
        namespaces=(
            labelled("default", **{"peerplane.dev/gateways": "allowed"}),
            labelled("tenant-b", team="b"),
        ),
    )
    statuses = route_statuses(cluster_state)
    for namespace, name in (("default", "web"), ("tenant-b", "bgw")):
        body = statuses[StatusKey(GATEWAY_GROUP, "Gateway", namespace, name)]
        found = {c["type"]: c for c in body["conditions"]}["Accepted"]
        assert (found["status"] == "True") is accepted[namespace], (namespace, found)
        if not accepted[namespace]:
            assert found["reason"] == "NamespaceNotAllowed"
            assert "gateway-namespaces" in found["message"]
    got = snapshot_of(cluster_state)
    assert any(lst.port == 9090 for lst in got.http_listeners) is accepted["tenant-b"]
    if selector == "not a selector (":
        assert any(w.startswith("ConfigMap") and "gateway-namespaces" in w for w in warnings(got))


def test_an_https_listener_of_another_namespace_cannot_cut_the_victims_http_port() -> None:
    """Before, an HTTP and an HTTPS listener on one port both went unserved, whoever made
    them: tenant B's HTTPS Gateway on the victim's port cut the victim's traffic."""
    port = 9090  # not the settings' http-port, where HTTPS is refused anyway
    https = gateway("bgw", namespace="tenant-b", port=port, protocol="HTTPS", created=NEW)
    cluster_state = tenants(*victim(port), https)
    assert backends(listener_of(snapshot_of(cluster_state), port)) == {VICTIM_BACKEND}
    status, reason, message = listener_conditions(cluster_state, "tenant-b", "bgw")["Conflicted"]
    assert (status, reason) == ("True", "ProtocolConflict")
    assert f"port {port} is served in HTTP by the older HTTP default/web listener http" in message
    assert listener_conditions(cluster_state, "default", "web")["Conflicted"][0] == "False"


# ---------------------------------------------------------------- properties of the rule

HOSTS = ("", "*.com", "*.x.com", "*.a.x.com", "a.x.com", "b.a.x.com", "y.com")
REQUESTS = ("a.x.com", "b.a.x.com", "c.b.a.x.com", "z.x.com", "y.com", "q.com", "other.org")
claims_strategy = st.lists(
    st.builds(
        lambda host, namespace, day: claim(host, namespace, f"2026-01-{day:02d}T00:00:00Z"),
        st.sampled_from(HOSTS),
        st.sampled_from(("a", "b", "c")),
        st.integers(1, 28),
    ),
    max_size=12,
)


def answering(holding: Holding, request: str) -> list[tuple[str, str]]:
    """The held hostnames a request's lookup visits, with their namespaces: those that
    match it from the most specific, up to the first closed one."""
    chain = sorted(
        (h for h in holding.holders if h and host_matches(h, request)),
        key=lambda h: (h.startswith("*."), -len(h)),
    )
    if ANY_HOST in holding.holders:
        chain.append(ANY_HOST)
    visited = []
    for host in chain:
        visited.append((host, holding.holders[host].namespace))
        if host in holding.closed:
            break
    return visited


@settings(max_examples=300, deadline=None)
@given(claims_strategy, st.randoms(use_true_random=False))
def test_one_namespace_answers_a_request_whatever_the_claims_and_their_order(
    claims: list[Claim], shuffle: random.Random
) -> None:
    holding = resolve(claims)
    for request in REQUESTS:
        assert len({namespace for _, namespace in answering(holding, request)}) <= 1, request
    mixed = list(claims)
    shuffle.shuffle(mixed)
    assert resolve(mixed) == holding


@settings(max_examples=300, deadline=None)
@given(claims_strategy, st.sampled_from(HOSTS), st.sampled_from(("a", "b", "c", "d")))
def test_a_newer_claim_never_takes_what_is_held(
    claims: list[Claim], host: str, namespace: str
) -> None:
    """Every held hostname keeps its holder, and a request answered through a named one
    keeps its namespace (a catch-all holds only the hosts nobody names: a newer named
    claim takes those)."""
    before = resolve(claims)
    after = resolve([*claims, claim(host, namespace, "2026-12-31T00:00:00Z")])
    for held, holder in before.holders.items():
        assert after.holders[held] == holder
    for request in REQUESTS:
        was = answering(before, request)
        if was and was[0][0] != ANY_HOST:  # a named hostname's namespace still answers
            assert answering(after, request)[0][1] == was[0][1], request


# ---------------------------------------------------------------- listener isolation


def lookup(listener: HttpListener, host: str, request_path: str) -> str:
    """The backend of the rule that answers a GET, as the agent's host layers look it up
    (nodeagent/config/listeners.py): the exact host, each wildcard from the longest, any
    host, each layer's rules in order; a closed layer with no match ends it: "404"."""
    for token in (host, *wider(host), ANY_HOST):
        for rule in listener.rules:
            if (token in rule.hostnames or (not token and not rule.hostnames)) and (
                rule.path is None
                or f"{request_path}/".startswith(f"{rule.path.value.rstrip('/')}/")
            ):
                return rule.backends[0].backend
        if token in listener.closed_hosts:
            return "404"
    return listener.default_backend or "404"


@pytest.mark.parametrize("intersecting", [False, True], ids=["listeners", "intersection"])
def test_a_request_is_answered_only_by_its_most_specific_listeners_routes(
    intersecting: bool,
) -> None:
    """GatewayHTTPListenerIsolation's shape: before, bar.example.com/empty-hostname fell
    through the wildcard listener's routes to the empty-hostname listener's, and with
    route hostnames abc.foo.example.com/empty-hostname was served by the route on the
    empty-hostname listener."""
    cluster_state = tenants(
        isolation_gateway(PORT), *isolation_routes(intersecting, service="shop")
    )
    listener = listener_of(snapshot_of(cluster_state))
    got = {(host, p): lookup(listener, host, p) for host, p in expected_answers("")}
    assert got == expected_answers(VICTIM_BACKEND)
    assert listener.closed_hosts == ("*.example.com", "*.foo.example.com", "abc.foo.example.com")
    # Every route attaches and is accepted (hostnames another listener takes are not
    # a refusal: the spec's own example).
    statuses = route_statuses(cluster_state)
    for name in ("attaches-to-empty-hostname", "attaches-to-abc-foo-example-com"):
        (parent,) = statuses[StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", name)]["parents"]
        assert {c["type"]: c["status"] for c in parent["conditions"]}["Accepted"] == "True"


def test_two_gateways_of_one_namespace_isolate_like_two_listeners() -> None:
    """A wildcard Gateway and an exact one of the same namespace on one port: a miss on
    the exact host is a 404, not the wildcard's route; equal hostnames still share."""
    specific = gateway("foo", port=PORT, hostname=HOST, created=NEW)
    only_cart = route("cart", [prefix_rule("/cart", [to("shop")])], parent={"name": "foo"})
    everything = route("all", [prefix_rule("/", [to("shop")])], created=OLD)
    listener = listener_of(snapshot_of(tenants(victim()[0], specific, only_cart, everything)))
    assert lookup(listener, HOST, "/cart") == VICTIM_BACKEND
    assert lookup(listener, HOST, "/other") == "404"  # before: the wildcard's route
    assert lookup(listener, "y.demo.example.com", "/other") == VICTIM_BACKEND
    assert listener.closed_hosts == (HOST,)


def test_an_ingress_shares_the_hosts_it_names_but_not_a_listeners_host_under_its_own() -> None:
    """An Ingress has no listener: a rule for a host the namespace's listener covers serves
    beside the listener's routes (by precedence, as before), but its catch-all and its
    defaultBackend answer no host a Gateway listener holds."""
    beside = ingress(
        "beside",
        [
            {"host": HOST, "http": {"paths": [path("/more", "Prefix", svc="catalog")]}},
            {"http": {"paths": [path("/", "Prefix", svc="catalog")]}},
        ],
        created=NEW,
    )
    cluster_state = state(
        *victim(),
        beside,
        services=(*SERVICES, service("catalog")),
        config=configmap(**{"http-port": str(PORT)}),
    )
    listener = listener_of(snapshot_of(cluster_state))
    assert lookup(listener, HOST, "/more") == "default_catalog_http"
    assert lookup(listener, HOST, "/cart") == VICTIM_BACKEND
    assert lookup(listener, HOST, "/other") == "404"  # before: the Ingress's catch-all
    assert lookup(listener, "other.org", "/") == "default_catalog_http"
    assert listener.closed_hosts == ("*.demo.example.com",)


@pytest.mark.parametrize(
    ("listener", "host", "shadowed_by"),
    [
        ("", "abc.x.com", "abc.x.com"),  # the most specific listener covering it
        ("", "*.a.x.com", "*.x.com"),
        ("*.x.com", "abc.x.com", "abc.x.com"),
        ("*.x.com", "b.x.com", None),  # no more specific listener: its own
        ("abc.x.com", "abc.x.com", None),
        ("", "other.org", None),
        ("", "", None),
    ],
)
def test_a_more_specific_listener_of_the_namespace_shadows_a_candidate(
    listener: str, host: str, shadowed_by: str | None
) -> None:
    listeners = [claim(h, "a", OLD) for h in ("", "*.x.com", "abc.x.com")]
    holding = resolve([*listeners, claim(host, "a", NEW)], listeners)
    assert holding.shadowing(listener, host, "a") == shadowed_by
    assert holding.shadowing(listener, host, "b") is None  # another namespace's: ownership


def test_another_namespaces_newer_listener_never_shadows_a_held_host() -> None:
    """Across namespaces the older claim keeps a host, even under a newer, more specific
    listener: B's `*.x.com` gets the rest of it, closed at A's host."""
    a_any, a_route = claim("", "a", OLD), claim("s.x.com", "a", OLD)
    b_wild = claim("*.x.com", "b", NEW)
    holding = resolve([a_any, a_route, b_wild], [a_any, b_wild])
    assert holding.shadowing("", "s.x.com", "a") is None
    assert holding.holders["s.x.com"] == a_route
    assert holding.closed == ("*.x.com", "s.x.com")


listeners_strategy = st.lists(
    st.builds(
        lambda host, namespace, day: claim(host, namespace, f"2026-01-{day:02d}T00:00:00Z"),
        st.sampled_from(HOSTS),
        st.sampled_from(("a", "b")),
        st.integers(1, 28),
    ),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(claims_strategy, listeners_strategy)
def test_a_lookup_never_passes_a_held_listener_hostname(
    claims: list[Claim], listeners: list[Claim]
) -> None:
    """A request's lookup visits no hostname less specific than the most specific held
    listener hostname matching it, and still one namespace."""
    holding = resolve([*claims, *listeners], listeners)
    for request in REQUESTS:
        visited = [host for host, _ in answering(holding, request)]
        assert len({namespace for _, namespace in answering(holding, request)}) <= 1, request
        mine = [h for h in holding.listeners if h and host_matches(h, request)]
        if mine:
            own = min(mine, key=lambda h: (h.startswith("*."), -len(h)))
            assert all(covers(own, host) for host in visited), (request, visited)
