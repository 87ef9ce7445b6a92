"""The route model's computation (controlplane/routes/): HTTPRoutes and Ingresses to each
workload's listeners, one rule at a time, asserted on the snapshots compute returns."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.compute import Computer, WorkloadSnapshot, compute
from controlplane.model import ClusterState, frozen_map
from controlplane.snapshot import Redirect, RoutePath, RouteRule, WeightedBackend
from controlplane.source.convert_gateway import namespace_from, reference_grant_from
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, endpoint_slice, service, settings
from tests.helpers.route_builders import (
    edge_pod,
    gateway,
    ingress,
    path,
    prefix,
    prefix_rule,
    route,
    state,
    to,
)


def snapshot_of(cluster_state: ClusterState, workload: str = WORKLOAD) -> WorkloadSnapshot:
    return compute(cluster_state, {}).workloads[workload]


def rules_of(snapshot: WorkloadSnapshot, port: int = 8080) -> list[RouteRule]:
    (listener,) = [lst for lst in snapshot.http_listeners if lst.port == port]
    return list(listener.rules)


def sources(snapshot: WorkloadSnapshot, port: int = 8080) -> list[str]:
    return [rule.source for rule in rules_of(snapshot, port)]


def reasons(snapshot: WorkloadSnapshot) -> list[str]:
    return [f"{w.object} {w.key}: {w.reason}" for w in snapshot.warnings]


# ---------------------------------------------------------------- attaching and serving


def test_http_route_becomes_a_listener_rule_with_weighted_backends() -> None:
    got = snapshot_of(
        state(
            gateway(),
            route(
                "store", [prefix_rule("/api", [to("catalog", weight=90), to("shop", weight=10)])]
            ),
        )
    )
    (rule,) = rules_of(got)
    assert rule == RouteRule(
        source="HTTPRoute default/store rule 0 match 0",
        hostnames=(),
        path=RoutePath("PathPrefix", "/api"),
        backends=(
            WeightedBackend("default_catalog_http", 90),
            WeightedBackend("default_shop_http", 10),
        ),
    )
    assert got.warnings == ()


def test_a_routed_service_is_a_backend_without_expose_with_its_own_settings() -> None:
    quiet = service("quiet", expose=False, annotations={"haproxy.org/load-balance": "leastconn"})
    got = snapshot_of(
        state(gateway(), route("r", [prefix_rule("/", [to("quiet")])]), services=(quiet,))
    )
    (spec,) = got.backends
    assert (spec.name, spec.mode, spec.balance) == ("default_quiet_http", "http", "leastconn")
    # Not exposed: no host or TCP claim, and no route elsewhere without the route.
    alone = compute(state(services=(quiet,)), {}).workloads[WORKLOAD]
    assert alone.backends == () and alone.http_listeners == ()


def test_routed_service_is_placed_only_on_the_gateways_workload() -> None:
    other = edge_pod()
    quiet = service("quiet", expose=False)
    result = compute(
        state(
            gateway(annotations={"peerplane.dev/workload": "haproxy-system/edge"}),
            route("r", [prefix_rule("/", [to("quiet")])]),
            services=(quiet,),
            pods=(*DEFAULT_PODS, other),
        ),
        {},
    )
    edge = result.workloads["haproxy-system/DaemonSet/edge"]
    assert [b.name for b in edge.backends] == ["default_quiet_http"]
    assert [rule.source for rule in edge.http_listeners[0].rules] == [
        "HTTPRoute default/r rule 0 match 0"
    ]
    main = result.workloads[WORKLOAD]
    assert main.backends == () and main.http_listeners == ()


def test_without_the_workload_annotation_two_workloads_leave_the_gateway_unserved() -> None:
    other = edge_pod()
    result = compute(
        state(gateway(), route("r", [prefix_rule("/", [to("shop")])]), pods=(*DEFAULT_PODS, other)),
        {},
    )
    assert all(s.http_listeners == () for s in result.workloads.values())


@pytest.mark.parametrize(
    ("listener", "hostnames", "served"),
    [
        ("", (), ()),
        ("*.example.com", (), ("*.example.com",)),
        ("*.example.com", ("a.example.com", "b.example.org"), ("a.example.com",)),
        ("a.example.com", ("*.example.com",), ("a.example.com",)),
        ("*.example.com", ("*.a.example.com",), ("*.a.example.com",)),
        ("*.a.example.com", ("*.example.com",), ("*.a.example.com",)),
        ("", ("a.example.com", "*.b.example.com"), ("a.example.com", "*.b.example.com")),
        ("*.example.com", ("example.com",), None),  # no intersection: not attached
    ],
)
def test_route_hostnames_are_intersected_with_the_listeners(
    listener: str, hostnames: tuple[str, ...], served: tuple[str, ...] | None
) -> None:
    got = snapshot_of(
        state(
            gateway(hostname=listener),
            route("r", [prefix_rule("/", [to("shop")])], hostnames=hostnames),
        )
    )
    found = [rule.hostnames for rule in rules_of(got)]
    if served is None:
        assert found == []
    else:
        assert sorted(found) == sorted((host,) for host in served) if served else found == [()]


@pytest.mark.parametrize(
    ("allowed", "namespace", "attached"),
    [
        (None, "default", True),
        (None, "team", False),  # Same by default
        ({"from": "All"}, "team", True),
        ({"from": "Selector", "selector": {"matchLabels": {"routes": "yes"}}}, "team", True),
        ({"from": "Selector", "selector": {"matchLabels": {"routes": "yes"}}}, "other", False),
        (
            {
                "from": "Selector",
                "selector": {"matchExpressions": [{"key": "routes", "operator": "Exists"}]},
            },
            "team",
            True,
        ),
    ],
)
def test_allowed_routes_namespaces(
    allowed: dict[str, Any] | None, namespace: str, attached: bool
) -> None:
    namespaces = (
        namespace_from({"metadata": {"name": "team", "labels": {"routes": "yes"}}}),
        namespace_from({"metadata": {"name": "other"}}),
    )
    got = snapshot_of(
        state(
            gateway(allowed=allowed),
            *namespaces,
            route("r", [prefix_rule("/", [to("shop", namespace="default")])], namespace=namespace),
            reference_grant_from(
                {
                    "metadata": {"name": "g", "namespace": "default"},
                    "spec": {
                        "from": [
                            {
                                "group": "gateway.networking.k8s.io",
                                "kind": "HTTPRoute",
                                "namespace": namespace,
                            }
                        ],
                        "to": [{"group": "", "kind": "Service"}],
                    },
                }
            ),
        )
    )
    assert bool(rules_of(got)) is attached


# ---------------------------------------------------------------- precedence and conflicts


def test_rules_are_ordered_by_the_gateway_api_precedence() -> None:
    rules = [
        {"matches": [prefix("/")], "backendRefs": [to("shop")]},  # 0
        {"matches": [prefix("/api")], "backendRefs": [to("shop")]},  # 1
        {
            "matches": [{"path": {"type": "Exact", "value": "/api"}}],
            "backendRefs": [to("shop")],
        },  # 2
        {"matches": [prefix("/api", method="GET")], "backendRefs": [to("shop")]},  # 3
        {
            "matches": [prefix("/api", method="GET", headers=[{"name": "x-a", "value": "1"}])],
            "backendRefs": [to("shop")],
        },  # 4
        {
            "matches": [
                prefix(
                    "/api",
                    method="GET",
                    headers=[{"name": "x-a", "value": "1"}],
                    queryParams=[{"name": "q", "value": "1"}],
                )
            ],
            "backendRefs": [to("shop")],
        },  # 5
        {"matches": [prefix("/api/v1")], "backendRefs": [to("shop")]},  # 6
    ]
    older = route(
        "older",
        [
            prefix_rule(
                "/api",
                [to("catalog")],
                matches=[prefix("/api", headers=[{"name": "x-b", "value": "2"}])],
            )
        ],
        created="2025-01-01T00:00:00Z",
    )
    wild = route("wild", [prefix_rule("/", [to("catalog")])], hostnames=("*.example.com",))
    exact = route("exact", [prefix_rule("/", [to("catalog")])], hostnames=("a.example.com",))
    got = snapshot_of(state(gateway(), route("r", rules), older, wild, exact))
    assert sources(got) == [
        "HTTPRoute default/exact rule 0 match 0",  # a non-wildcard hostname first
        "HTTPRoute default/wild rule 0 match 0",  # then the longest hostname
        "HTTPRoute default/r rule 2 match 0",  # Exact path
        "HTTPRoute default/r rule 6 match 0",  # longest prefix
        "HTTPRoute default/r rule 5 match 0",  # method, most headers, then queries
        "HTTPRoute default/r rule 4 match 0",
        "HTTPRoute default/r rule 3 match 0",
        "HTTPRoute default/older rule 0 match 0",  # headers, no method
        "HTTPRoute default/r rule 1 match 0",
        "HTTPRoute default/r rule 0 match 0",
    ]


def test_identical_matches_keep_the_oldest_route_and_report_the_other() -> None:
    first = route("b-first", [prefix_rule("/api", [to("shop")])], created="2025-01-01T00:00:00Z")
    second = route(
        "a-second", [prefix_rule("/api/", [to("catalog")])], created="2026-01-01T00:00:00Z"
    )
    tie = route("c-tie", [prefix_rule("/api", [to("catalog")])], created="2025-01-01T00:00:00Z")
    got = snapshot_of(state(gateway(), first, second, tie))
    assert sources(got) == ["HTTPRoute default/b-first rule 0 match 0"]
    assert reasons(got) == [  # in precedence order: the tie is older than a-second
        "HTTPRoute default/c-tie spec.rules[0].matches[0]: same match as HTTPRoute "
        "default/b-first rule 0 match 0, which takes precedence: dropped",
        "HTTPRoute default/a-second spec.rules[0].matches[0]: same match as HTTPRoute "
        "default/b-first rule 0 match 0, which takes precedence: dropped",
    ]


def test_header_names_conflict_in_any_case() -> None:
    one = route(
        "one",
        [
            prefix_rule(
                "/", [to("shop")], matches=[prefix("/", headers=[{"name": "X-A", "value": "1"}])]
            )
        ],
    )
    two = route(
        "two",
        [
            prefix_rule(
                "/", [to("shop")], matches=[prefix("/", headers=[{"name": "x-a", "value": "1"}])]
            )
        ],
    )
    got = snapshot_of(state(gateway(), one, two))
    assert sources(got) == ["HTTPRoute default/one rule 0 match 0"]
    assert len(got.warnings) == 1


# ---------------------------------------------------------------- bad input, the rest served


def test_unsupported_matches_and_filters_are_reported_and_the_rest_served() -> None:
    rules = [
        {
            "matches": [{"path": {"type": "RegularExpression", "value": "/a.*"}}, prefix("/ok")],
            "backendRefs": [to("shop")],
        },
        {
            "matches": [
                prefix("/h", headers=[{"type": "RegularExpression", "name": "x", "value": ".*"}])
            ],
            "backendRefs": [to("shop")],
        },
        {
            "matches": [prefix("/u")],
            "filters": [{"type": "RequestMirror", "requestMirror": {}}],
            "backendRefs": [to("shop")],
        },
        {"matches": [prefix("/bad path")], "backendRefs": [to("shop")]},
        {"matches": [prefix("/m", method="BREW")], "backendRefs": [to("shop")]},
        {
            "matches": [{"path": {"type": "Exact", "value": "/r"}}],
            "filters": [
                {
                    "type": "RequestRedirect",
                    "requestRedirect": {
                        "path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/x"}
                    },
                }
            ],
        },
        {
            "matches": [prefix("/q", queryParams=[{"name": "a b", "value": "1"}])],
            "backendRefs": [to("shop")],
        },
    ]
    got = snapshot_of(
        state(
            gateway(),
            route(
                "r",
                rules,
                hostnames=("ok.example.com", "Bad_Host"),
                annotations={"haproxy.org/load-balance": "source"},
            ),
        )
    )
    assert sources(got) == ["HTTPRoute default/r rule 0 match 1"]
    assert rules_of(got)[0].hostnames == ("ok.example.com",)
    assert reasons(got) == [
        "HTTPRoute default/r haproxy.org/load-balance: haproxy.org annotations belong on the "
        "Service; ignored here",
        "HTTPRoute default/r spec.hostnames[1]: not a lower-case host name or *. wildcard; dropped",
        "HTTPRoute default/r spec.rules[0].matches[0].path.type: only Exact and PathPrefix "
        "paths are served; match not served",
        "HTTPRoute default/r spec.rules[1].matches[0].headers[0].type: only Exact header "
        "matches are served; match not served",
        "HTTPRoute default/r spec.rules[2].filters[0]: RequestMirror not served: HAProxy "
        "mirrors requests only through an external SPOE agent (spoa-mirror), which peerplane "
        "does not run; rule not served",
        "HTTPRoute default/r spec.rules[3].matches[0].path.value: not a path of letters, "
        "digits and -._~%/+,;=:@!; match not served",
        "HTTPRoute default/r spec.rules[4].matches[0].method: not an HTTP method; match not served",
        "HTTPRoute default/r spec.rules[5].filters[0]: replacePrefixMatch needs exactly one "
        "PathPrefix match; rule not served",
        "HTTPRoute default/r spec.rules[6].matches[0].queryParams[0]: not a query parameter "
        "peerplane serves; match not served",
    ]


def redirect(**fields: Any) -> dict[str, Any]:
    return {"type": "RequestRedirect", "requestRedirect": fields}


@pytest.mark.parametrize(
    ("bad_rule", "warning"),
    [
        (
            {"matches": [prefix("/r")], "filters": [redirect(port=99_999)]},
            "spec.rules[1].filters[0]: port 99999 is not in 1-65535",
        ),
        (
            {"matches": [prefix("/r")], "filters": [redirect(port=0)]},
            "spec.rules[1].filters[0]: port 0 is not in 1-65535",
        ),
        (
            {
                "matches": [prefix("/r")],
                "backendRefs": [to("shop", weight=9), to("shop", weight=-5)],
            },
            "spec.rules[1].backendRefs[1].weight: weight is not in 0-1000000",
        ),
        (
            {"matches": [prefix("/r")], "backendRefs": [to("shop", weight=1_000_001)]},
            "spec.rules[1].backendRefs[0].weight: weight is not in 0-1000000",
        ),
        (
            {"matches": [prefix("/r")], "filters": [redirect(statusCode=304)]},
            "spec.rules[1].filters[0]: status code 304 (301, 302, 303, 307, 308 only)",
        ),
        (
            {
                "matches": [prefix("/r"), prefix("/s")],
                "filters": [
                    redirect(path={"type": "ReplacePrefixMatch", "replacePrefixMatch": "/n"})
                ],
            },
            "spec.rules[1].filters[0]: replacePrefixMatch needs exactly one PathPrefix match",
        ),
        (
            {
                "matches": [prefix("/r")],
                "filters": [
                    {"type": "URLRewrite", "urlRewrite": {"hostname": "a.example.org"}},
                    redirect(statusCode=301),
                ],
            },
            "spec.rules[1].filters[1]: a RequestRedirect and a URLRewrite cannot go together",
        ),
    ],
    ids=[
        "redirect-port-99999",
        "redirect-port-0",
        "weight-negative",
        "weight-too-large",
        "redirect-code-304",
        "prefix-on-two-matches",
        "rewrite-with-redirect",
    ],
)
def test_a_value_the_schema_refuses_drops_its_rule_alone(
    bad_rule: dict[str, Any], warning: str
) -> None:
    """What the CRD's schema refuses (a redirect port outside 1-65535, a weight outside
    0-1,000,000) refused the whole route in folder mode; it refuses that rule only, the
    rule's written split never served as another."""
    rules = [
        {"matches": [prefix("/good")], "backendRefs": [to("shop")]},
        bad_rule,
        {"matches": [prefix("/also")], "filters": [redirect(port=8443)]},
    ]
    got = snapshot_of(state(gateway(), route("r", rules)))
    assert sources(got) == [
        "HTTPRoute default/r rule 0 match 0",
        "HTTPRoute default/r rule 2 match 0",
    ]
    redirected = rules_of(got)[1].filter(Redirect)
    assert redirected is not None and redirected.port == 8443
    assert reasons(got) == [f"HTTPRoute default/r {warning}; rule not served"]


def test_unresolved_backends_keep_their_weight_with_no_name() -> None:
    rules = [
        {
            "matches": [prefix("/")],
            "backendRefs": [
                to("shop", weight=3),
                to("missing"),
                to("shop", port=81),
                to("elsewhere", namespace="team"),
                {"name": "bucket", "group": "example.com", "kind": "Bucket"},
                {"name": "shop"},  # no port
            ],
        }
    ]
    got = snapshot_of(
        state(
            gateway(),
            route("r", rules),
            services=(service("shop"), service("elsewhere", namespace="team")),
        )
    )
    (rule,) = rules_of(got)
    assert rule.backends == (
        WeightedBackend("default_shop_http", 3),
        WeightedBackend("", 1),
        WeightedBackend("", 1),
        WeightedBackend("", 1),
        WeightedBackend("", 1),
        WeightedBackend("", 1),
    )
    assert [w.reason for w in got.warnings] == [
        "Service default/missing not found: its share gets a 500",
    ]  # one per rule: the first unresolved reference (ResolvedRefs names the rest)


def test_a_reference_grant_lets_a_route_reach_another_namespace() -> None:
    grant = reference_grant_from(
        {
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {
                "from": [
                    {
                        "group": "gateway.networking.k8s.io",
                        "kind": "HTTPRoute",
                        "namespace": "default",
                    }
                ],
                "to": [{"group": "", "kind": "Service", "name": "elsewhere"}],
            },
        }
    )
    rules = [{"matches": [prefix("/")], "backendRefs": [to("elsewhere", namespace="team")]}]
    services = (service("elsewhere", namespace="team", expose=False),)
    got = snapshot_of(state(gateway(), route("r", rules), grant, services=services))
    assert rules_of(got)[0].backends == (WeightedBackend("team_elsewhere_http", 1),)
    assert [b.name for b in got.backends] == ["team_elsewhere_http"]


def test_a_tcp_service_cannot_serve_a_route() -> None:
    db = service("db", annotations={"haproxy.org/tcp-port": "5432"})
    got = snapshot_of(state(gateway(), route("r", [prefix_rule("/", [to("db")])]), services=(db,)))
    assert rules_of(got)[0].backends == (WeightedBackend("", 1),)
    assert "backend not served over HTTP" in reasons(got)[0]


def test_a_listener_port_wins_over_a_services_tcp_port() -> None:
    db = service("db", annotations={"haproxy.org/tcp-port": "8080"})
    got = snapshot_of(
        state(
            gateway(), route("r", [prefix_rule("/", [to("shop")])]), services=(db, service("shop"))
        )
    )
    assert got.tcp_frontends == ()
    assert (
        got.backend("default_db_http").warnings[-1].reason
        == "port already used by a Gateway or Ingress route listener"
    )


def test_a_listener_on_the_peer_port_is_not_served() -> None:
    got = snapshot_of(state(gateway(port=10000), route("r", [prefix_rule("/", [to("shop")])])))
    assert got.http_listeners == ()


# ---------------------------------------------------------------- Ingress


def test_ingress_rules_go_to_the_http_port_with_the_default_class() -> None:
    rules = [
        {
            "host": "a.example.com",
            "http": {
                "paths": [
                    path("/app/", "Prefix"),
                    path("/exact", "Exact", "catalog", {"name": "http"}),
                    path("/impl", "ImplementationSpecific"),
                ]
            },
        },
        {"host": "*.example.com", "http": {"paths": [path("/", "Prefix", "catalog")]}},
        {"http": {"paths": [path("/any", "Prefix")]}},
    ]
    got = snapshot_of(
        state(
            ingress(
                "web",
                rules,
                defaultBackend={"service": {"name": "catalog", "port": {"number": 80}}},
            ),
            config=settings(**{"http-port": "18080"}),
        )
    )
    (listener,) = got.http_listeners
    assert (listener.port, listener.default_backend) == (18080, "default_catalog_http")
    assert [(r.hostnames, r.path) for r in listener.rules] == [
        (("a.example.com",), RoutePath("Exact", "/exact")),
        (("a.example.com",), RoutePath("PathPrefix", "/impl")),
        (("a.example.com",), RoutePath("PathPrefix", "/app")),
        (("*.example.com",), RoutePath("PathPrefix", "/")),
        ((), RoutePath("PathPrefix", "/any")),
    ]


def test_an_ingress_wildcard_takes_one_label_a_gateway_api_wildcard_any() -> None:
    """The Ingress API: `*.foo.com` matches exactly one label; the Gateway API: any number.
    The rule says which (`single_label_wildcards`, the agent's `*.` / `**.` layers)."""
    got = snapshot_of(
        state(
            gateway(port=18080),
            route("r", [prefix_rule("/gw", [to("shop")])], hostnames=("*.foo.com",)),
            ingress(
                "web",
                [
                    {"host": "*.foo.com", "http": {"paths": [path("/", "Prefix")]}},
                    {"host": "a.foo.com", "http": {"paths": [path("/", "Prefix")]}},
                ],
            ),
            config=settings(**{"http-port": "18080"}),
        )
    )
    (listener,) = got.http_listeners
    assert [(r.source, r.hostnames, r.single_label_wildcards) for r in listener.rules] == [
        ("Ingress default/web rule 1 path 0", ("a.foo.com",), False),
        ("HTTPRoute default/r rule 0 match 0", ("*.foo.com",), False),
        ("Ingress default/web rule 0 path 0", ("*.foo.com",), True),
    ]


def test_ingress_of_another_class_is_not_ours_and_bad_paths_are_reported() -> None:
    mine = ingress(
        "mine",
        [
            {
                "host": "a.example.com",
                "http": {
                    "paths": [
                        path("/ok", "Prefix"),
                        path("/x", "Regex"),
                        path("/r", "Prefix", port={"number": 99}),
                    ]
                },
            }
        ],
        ingressClassName="peerplane",
    )
    theirs = ingress(
        "theirs", [{"http": {"paths": [path("/", "Prefix")]}}], ingressClassName="nginx"
    )
    got = snapshot_of(state(mine, theirs))
    assert [r.source for r in got.http_listeners[0].rules] == [
        "Ingress default/mine rule 0 path 0",  # the longer path first
        "Ingress default/mine rule 0 path 2",
    ]
    assert reasons(got) == [
        "Ingress default/mine spec.rules[0].http.paths[1]: not pathType Exact, Prefix or "
        "ImplementationSpecific with a path peerplane serves; path not served",
        "Ingress default/mine spec.rules[0].http.paths[2].backend: Service default/shop has no "
        "port 99: a 500",
    ]


def test_an_ingress_rule_equal_to_a_hosts_route_leaves_it_to_the_service() -> None:
    shop = service("shop", annotations={"haproxy.org/hosts": "a.example.com"})
    got = snapshot_of(
        state(
            ingress(
                "web",
                [
                    {
                        "host": "a.example.com",
                        "http": {
                            "paths": [
                                path("/", "Prefix", "catalog"),
                                path("/c", "Prefix", "catalog"),
                            ]
                        },
                    }
                ],
            ),
            services=(shop, service("catalog")),
        )
    )
    assert [r.source for r in got.http_listeners[0].rules] == ["Ingress default/web rule 0 path 1"]
    assert reasons(got)[-1].endswith(
        "a Service's haproxy.org/hosts route keeps this host and path: dropped"
    )


# ---------------------------------------------------------------- cost follows change


def test_endpoint_and_annotation_changes_do_not_recompute_routes() -> None:
    computer = Computer()
    base = state(gateway(), route("r", [prefix_rule("/", [to("shop")])]))
    first = computer.compute(base, {})
    assert computer._routes.computed == 1
    moved = dataclasses.replace(base, endpoint_slices=(endpoint_slice("shop", ["10.0.0.1"]),))
    second = computer.compute(moved, first.assignment)
    annotated = dataclasses.replace(
        moved,
        services=tuple(
            dataclasses.replace(
                s, annotations=frozen_map({**s.annotations, "haproxy.org/load-balance": "source"})
            )
            for s in moved.services
        ),
    )
    third = computer.compute(annotated, second.assignment)
    assert computer._routes.computed == 1
    assert third.workloads[WORKLOAD].http_listeners is first.workloads[WORKLOAD].http_listeners
    reported = dataclasses.replace(
        annotated, services=(service("shop", ports=(("http", 81),)), service("catalog"))
    )
    fourth = computer.compute(reported, third.assignment)
    assert computer._routes.computed == 2
    assert fourth.workloads[WORKLOAD].http_listeners[0].rules[0].backends == (
        WeightedBackend("", 1),
    )


def test_incremental_routes_equal_a_fresh_computation_after_each_change() -> None:
    computer = Computer()
    steps = [
        state(gateway(), route("r", [prefix_rule("/", [to("shop")])])),
        state(
            gateway(),
            route("r", [prefix_rule("/", [to("quiet")])]),
            services=(service("shop"), service("quiet", expose=False)),
        ),
        state(gateway(), services=(service("shop"), service("quiet", expose=False))),
        state(
            gateway(),
            ingress("i", [{"http": {"paths": [path("/", "Prefix", "quiet")]}}]),
            services=(service("shop"), service("quiet", expose=False)),
        ),
    ]
    previous: Any = {}
    for step in steps:
        got = computer.compute(step, previous)
        fresh = compute(step, previous)
        assert got.workloads == fresh.workloads
        assert got.rejections == fresh.rejections
        previous = got.assignment


def test_a_changed_route_among_kept_ones_equals_a_fresh_computation() -> None:
    """Unchanged routes keep their outcomes (by identity) while nothing they read moved;
    a ReferenceGrant or Service port change makes every route count again."""
    kept = [
        route(f"r{i}", [prefix_rule(f"/p{i}", [to("shop", namespace="team")])]) for i in range(3)
    ]
    team = service("shop", namespace="team")
    grant = reference_grant_from(
        {
            "metadata": {"name": "g", "namespace": "team"},
            "spec": {
                "from": [
                    {
                        "group": "gateway.networking.k8s.io",
                        "kind": "HTTPRoute",
                        "namespace": "default",
                    }
                ],
                "to": [{"group": "", "kind": "Service"}],
            },
        }
    )
    web = gateway()
    steps = [
        state(web, *kept, services=(team,)),
        state(
            web,
            *kept[:2],
            route("r2", [prefix_rule("/new", [to("catalog")])]),
            services=(team, service("catalog")),
        ),
        state(web, *kept[:2], grant, services=(team,)),
        state(
            web,
            *kept[:2],
            grant,
            services=(service("shop", namespace="team", ports=(("http", 81),)),),
        ),
    ]
    computer, previous = Computer(), {}
    for step in steps:
        got = computer.compute(step, previous)
        fresh = compute(step, previous)
        assert got.workloads == fresh.workloads and got.rejections == fresh.rejections
        previous = got.assignment


def test_a_route_not_attached_is_reported_in_the_gateways_snapshot() -> None:
    got = snapshot_of(
        state(
            gateway(),
            route(
                "r", [prefix_rule("/", [to("shop")])], parent={"name": "web", "sectionName": "tls"}
            ),
        )
    )
    assert got.http_listeners[0].rules == ()
    assert reasons(got) == [
        "HTTPRoute default/r spec.parentRefs[0]: NoMatchingParent: no listener of the Gateway "
        "has this sectionName and port; not attached"
    ]
