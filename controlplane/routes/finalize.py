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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import is_not

from controlplane.routes.l4 import http_names
from controlplane.routes.table import WorkloadRoutes
from controlplane.sequences import common_ends
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


@dataclass(frozen=True, slots=True)
class _ListenerFinal:
    """One listener's rules as finalized: each input rule's outcome (None: dropped) and
    rejections, position by position, so the next route change redoes only its window."""

    rules: tuple[RouteRule, ...]  # the listener's rules in
    host_rules: bool  # on the HTTP frontend's port: `haproxy.org/hosts` routes apply
    outs: list[RouteRule | None]
    rejected: list[tuple[RejectedInput, ...]]
    changes: int  # outcomes that are not their rule (dropped or a backend cleared)


@dataclass(frozen=True, slots=True)
class Finalized:
    """`finalize`'s result with what `finalize_again` needs to redo only what changed."""

    listeners: tuple[HttpListener, ...]
    rejections: tuple[RejectedInput, ...]
    hosts: frozenset[str] = frozenset()
    http_port: int | None = None
    missing: frozenset[str] = frozenset()
    parts: tuple[_ListenerFinal, ...] = ()


def _final_rule(
    rule: RouteRule, host_rules: bool, hosts: frozenset[str], missing: frozenset[str]
) -> tuple[RouteRule | None, tuple[RejectedInput, ...]]:
    """One rule as the snapshot carries it (None: dropped) and what it adds."""
    if host_rules and _is_host_route(rule, hosts):
        reason = "a Service's haproxy.org/hosts route keeps this host and path: dropped"
        return None, (_rejection(rule, "hostnames", rule.hostnames[0], reason),)
    if not any(b.backend in missing for b in rule.backends):
        return rule, ()
    reason = "backend not served over HTTP (refused, or a TCP Service): a 500"
    rejected = tuple(
        _rejection(rule, "backend", b.backend, reason)
        for b in rule.backends
        if b.backend in missing
    )
    backends = tuple(
        WeightedBackend("", b.weight) if b.backend in missing else b for b in rule.backends
    )
    return dataclasses.replace(rule, backends=backends), rejected


def _changes(outs: list[RouteRule | None], rules: Sequence[RouteRule]) -> int:
    return sum(map(is_not, outs, rules))


def _listener_final(
    rules: tuple[RouteRule, ...],
    host_rules: bool,
    hosts: frozenset[str],
    missing: frozenset[str],
    last: _ListenerFinal | None,
) -> _ListenerFinal:
    """The listener's rules finalized; with `last` (same hosts and missing backends),
    only the rules between the common prefix and suffix of its rules and these (by
    identity, in C) are finalized again."""
    head, old_end, new_end = 0, 0, len(rules)
    if last is not None and last.host_rules == host_rules:
        if last.rules is rules:
            return last
        head, tail = common_ends(last.rules, rules)
        old_end, new_end = len(last.rules) - tail, len(rules) - tail
    else:
        last = None
    window = [_final_rule(rule, host_rules, hosts, missing) for rule in rules[head:new_end]]
    outs = [out for out, _ in window]
    rejected = [found for _, found in window]
    changes = _changes(outs, rules[head:new_end])
    if last is None:
        return _ListenerFinal(rules, host_rules, outs, rejected, changes)
    changes += last.changes - _changes(last.outs[head:old_end], last.rules[head:old_end])
    return _ListenerFinal(
        rules,
        host_rules,
        last.outs[:head] + outs + last.outs[old_end:],
        last.rejected[:head] + rejected + last.rejected[old_end:],
        changes,
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
    done = finalize_again(routes, http_frontend, mode_of, names, missing, None)
    return done.listeners, done.rejections


def finalize_again(
    routes: WorkloadRoutes,
    http_frontend: HttpFrontend | None,
    mode_of: Callable[[str], str | None],
    names: tuple[str, ...] | None,
    missing: frozenset[str] | None,
    last: Finalized | None,
) -> Finalized:
    """`finalize`, from the `last` result: while the `haproxy.org/hosts` routes, the HTTP
    port and the backends not served over HTTP are the same, each listener's rules are
    finalized again only where a change touched them (a route change among 10,000 routes:
    its rules, not all 20,000 in Python). Equal to `finalize` from scratch."""
    if missing is None:
        missing = not_http(referenced(routes) if names is None else names, mode_of)
    hosts = frozenset(r.host for r in http_frontend.routes) if http_frontend else frozenset()
    http_port = http_frontend.port if http_frontend else None
    if not missing and not hosts:
        return Finalized(routes.listeners, ())
    reusable = (
        last is not None
        and last.hosts == hosts
        and last.http_port == http_port
        and last.missing == missing
        and len(last.parts) == len(routes.listeners)
    )
    parts = tuple(
        _listener_final(
            listener.rules,
            listener.port == http_port,
            hosts,
            missing,
            last.parts[i] if reusable and last is not None else None,
        )
        for i, listener in enumerate(routes.listeners)
    )
    defaults = [listener.default_backend in missing for listener in routes.listeners]
    if not any(part.changes for part in parts) and not any(defaults):
        return Finalized(routes.listeners, (), hosts, http_port, missing, parts)
    listeners = tuple(
        dataclasses.replace(
            listener,
            rules=tuple(filter(None, part.outs)) if part.changes else part.rules,
            default_backend="" if cleared else listener.default_backend,
        )
        for listener, part, cleared in zip(routes.listeners, parts, defaults, strict=True)
    )
    rejections = tuple(chain.from_iterable(chain.from_iterable(p.rejected for p in parts)))
    return Finalized(listeners, rejections, hosts, http_port, missing, parts)
