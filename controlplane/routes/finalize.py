"""A workload's route table made consistent with its assembled snapshot.

The table is computed from Services' existence and ports alone; the snapshot decides the
rest: a routed Service the planner refused, or one exposed in TCP mode, has no HTTP
backend, so a rule's share for it becomes unresolved (a 500, reported). And a listener
rule equal to a `haproxy.org/hosts` route of the same port (exact host, PathPrefix "/",
nothing else) is dropped and reported: the Service's route keeps the host, so no two
rules with the same match reach the agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from controlplane.routes.l4 import http_names
from controlplane.routes.table import WorkloadRoutes
from controlplane.settings.values import shown
from controlplane.snapshot import (
    HttpFrontend,
    HttpListener,
    RejectedInput,
    RouteRule,
    WeightedBackend,
)


def referenced(routes: WorkloadRoutes) -> tuple[str, ...]:
    """Every backend name the listeners use, sorted (the table's when it knows them)."""
    if routes.names is not None:
        return routes.names
    return tuple(sorted(http_names(routes.listeners)))


def not_http(names: tuple[str, ...], mode_of: Callable[[str], str | None]) -> frozenset[str]:
    """The backend names not served over HTTP (refused, or a TCP Service)."""
    return frozenset(name for name in names if mode_of(name) != "http")


def _rejection(rule: RouteRule, key: str, value: str, reason: str) -> RejectedInput:
    """A rejection on the object a rule's source names ("Kind ns/name rule ...")."""
    kind, ref = rule.source.split(" ")[:2]
    namespace, _, name = ref.partition("/")
    return RejectedInput(kind, namespace, name, key, shown(value), reason)


def _is_host_route(rule: RouteRule, hosts: frozenset[str]) -> bool:
    path = rule.path
    return (
        len(rule.hostnames) == 1
        and rule.hostnames[0] in hosts
        and (path is None or (path.type == "PathPrefix" and path.value == "/"))
        and not (rule.method or rule.headers or rule.query_params)
    )


def finalize(
    routes: WorkloadRoutes,
    http_frontend: HttpFrontend | None,
    mode_of: Callable[[str], str | None],
    names: tuple[str, ...] | None = None,
    missing: frozenset[str] | None = None,
) -> tuple[tuple[HttpListener, ...], tuple[RejectedInput, ...]]:
    """The listeners as the snapshot carries them and the rejections this adds;
    `routes.listeners` itself when nothing changes. `names`: `referenced(routes)` when
    the caller has it already; `missing`: those of them not served over HTTP
    (`not_http`), when it has that too."""
    if missing is None:
        missing = not_http(referenced(routes) if names is None else names, mode_of)
    hosts = frozenset(r.host for r in http_frontend.routes) if http_frontend else frozenset()
    http_port = http_frontend.port if http_frontend else None
    if not missing and not hosts:
        return routes.listeners, ()
    rejections: list[RejectedInput] = []
    listeners: list[HttpListener] = []
    changed = False
    for listener in routes.listeners:
        rules: list[RouteRule] = []
        for rule in listener.rules:
            if listener.port == http_port and _is_host_route(rule, hosts):
                reason = "a Service's haproxy.org/hosts route keeps this host and path: dropped"
                rejections.append(_rejection(rule, "hostnames", rule.hostnames[0], reason))
                changed = True
                continue
            if any(b.backend in missing for b in rule.backends):
                for b in rule.backends:
                    if b.backend in missing:
                        reason = "backend not served over HTTP (refused, or a TCP Service): a 500"
                        rejections.append(_rejection(rule, "backend", b.backend, reason))
                backends = tuple(
                    WeightedBackend("", b.weight) if b.backend in missing else b
                    for b in rule.backends
                )
                rule = dataclasses.replace(rule, backends=backends)
                changed = True
            rules.append(rule)
        default = listener.default_backend
        if default in missing:
            default, changed = "", True
        listeners.append(dataclasses.replace(listener, rules=tuple(rules), default_backend=default))
    if not changed:
        return routes.listeners, ()
    return tuple(listeners), tuple(rejections)
