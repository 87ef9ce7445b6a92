"""`finalize_again`: a route change among many finalizes only the rules it touched, and
the result equals `finalize` from scratch (rules dropped for a `haproxy.org/hosts` route,
shares of a backend not served over HTTP cleared, in every order)."""

from __future__ import annotations

import random

import pytest

from controlplane.compute import Computer, compute
from controlplane.routes import finalize as finalizing
from controlplane.routes.finalize import Finalized, finalize, finalize_again
from controlplane.routes.table_types import WorkloadRoutes
from controlplane.snapshot import (
    HostRoute,
    HttpFrontend,
    HttpListener,
    RoutePath,
    RouteRule,
    WeightedBackend,
)
from tests.helpers.builders import service
from tests.helpers.route_builders import gateway, route, state, to

HTTP_PORT = 8080
HOSTS = ("a.example.com", "b.example.com", "c.example.com", "d.example.com")
BACKENDS = ("shop", "catalog", "tcp-db")  # tcp-db: not served over HTTP
FRONTEND = HttpFrontend(HTTP_PORT, (HostRoute("a.example.com", "shop"),))


def _mode(name: str) -> str | None:
    return "tcp" if name == "tcp-db" else "http"


def _rule(rng: random.Random, name: str) -> RouteRule:
    path = rng.choice((None, RoutePath("PathPrefix", "/"), RoutePath("PathPrefix", "/x")))
    backends = tuple(WeightedBackend(rng.choice(BACKENDS), 1) for _ in range(rng.choice((1, 1, 2))))
    return RouteRule(
        f"HTTPRoute default/{name} rule 0", (rng.choice(HOSTS),), path, "", (), (), backends
    )


def _routes(listeners: list[list[RouteRule]], ports: tuple[int, ...]) -> WorkloadRoutes:
    return WorkloadRoutes(
        tuple(
            HttpListener(port, tuple(rules), "tcp-db" if port == 9090 else "")
            for port, rules in zip(ports, listeners, strict=True)
        )
    )


@pytest.mark.parametrize("seed", range(6))
def test_finalized_again_equals_finalize_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    ports = (HTTP_PORT, 9090)
    listeners = [[_rule(rng, f"r{i}") for i in range(rng.randint(0, 30))] for _ in ports]
    frontend: HttpFrontend | None = FRONTEND
    last: Finalized | None = None
    for step in range(60):
        routes = _routes(listeners, ports)
        done = finalize_again(routes, frontend, _mode, None, None, last)
        assert (done.listeners, done.rejections) == finalize(routes, frontend, _mode)
        last = done
        rules = listeners[rng.randrange(len(ports))]
        change = rng.random()
        if change < 0.4 or not rules:
            rules.insert(rng.randint(0, len(rules)), _rule(rng, f"n{step}"))
        elif change < 0.7:
            del rules[rng.randrange(len(rules))]
        elif change < 0.9:
            rules[rng.randrange(len(rules))] = _rule(rng, f"m{step}")
        else:  # another set of haproxy.org/hosts routes: finalized from scratch
            frontend = rng.choice((None, FRONTEND, HttpFrontend(HTTP_PORT, ())))


def test_a_route_change_finalizes_only_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """One rule added among 2,000 under a `haproxy.org/hosts` route: the rules around it
    are not looked at again (they were: one Python step per rule, 8 ms at 10,000)."""
    rng = random.Random(7)
    rules = [_rule(rng, f"r{i}") for i in range(2000)]
    last = finalize_again(_routes([rules], (HTTP_PORT,)), FRONTEND, _mode, None, None, None)
    looked_at: list[RouteRule] = []
    final_rule = finalizing._final_rule

    def counted(rule: RouteRule, *args: object) -> object:
        looked_at.append(rule)
        return final_rule(rule, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(finalizing, "_final_rule", counted)
    added = _rule(rng, "new")
    rules.insert(1000, added)
    routes = _routes([rules], (HTTP_PORT,))
    done = finalize_again(routes, FRONTEND, _mode, None, None, last)
    assert looked_at == [added]
    monkeypatch.undo()
    assert (done.listeners, done.rejections) == finalize(routes, FRONTEND, _mode)


def test_a_new_route_in_the_computer_finalizes_only_its_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through `Computer`: with a `haproxy.org/hosts` Service on the Gateway's port, a new
    HTTPRoute among 300 makes its rules alone checked against the hosts routes (every rule
    was, each route change: O(routes) in Python)."""
    shop = service("shop", annotations={"haproxy.org/hosts": "a.example.com"})
    routes = [
        route(f"r{i}", [{"backendRefs": [to("shop")]}], hostnames=(f"h{i}.example.com",))
        for i in range(300)
    ]
    gateway_ = gateway("web", port=80)
    computer = Computer()
    first = computer.compute(state(gateway_, *routes, services=(shop, service("catalog"))), {})
    checked: list[RouteRule] = []
    is_host_route = finalizing._is_host_route

    def counted(rule: RouteRule, hosts: frozenset[str]) -> bool:
        checked.append(rule)
        return is_host_route(rule, hosts)

    monkeypatch.setattr(finalizing, "_is_host_route", counted)
    new = route("new", [{"backendRefs": [to("catalog")]}], hostnames=("new.example.com",))
    after = state(gateway_, *routes, new, services=(shop, service("catalog")))
    result = computer.compute(after, first.assignment)
    assert [rule.source for rule in checked] == ["HTTPRoute default/new rule 0 match 0"]
    assert result.workloads == compute(after, first.assignment).workloads
