"""Final assembly: a workload's assembled snapshot completed with what the route table
gives it, its HTTP listeners, its TLS passthrough listeners and route TCP frontends, and
the settings' PROXY protocol on the ports the table leaves out.

Each part is made consistent with the snapshot's backends again only when its inputs
changed, and kept by identity otherwise, so the encoder reuses its bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import is_not

from controlplane.compute.assemble_incremental import WorkloadAssembly
from controlplane.routes.finalize import Finalized, finalize_again, not_http, referenced
from controlplane.routes.l4 import WorkloadL4
from controlplane.routes.l4 import finalize as finalize_l4
from controlplane.routes.table import WorkloadRoutes
from controlplane.sequences import common_ends
from controlplane.snapshot import (
    BackendSpec,
    HostRoute,
    HttpFrontend,
    HttpListener,
    RejectedInput,
    RouteRule,
    TcpFrontend,
    TlsPassthroughListener,
    WeightedBackend,
    WorkloadSnapshot,
)


@dataclass(frozen=True, slots=True)
class _Final:
    """One workload's listeners as last finalized, with what they were made from."""

    routes: WorkloadRoutes
    http: HttpFrontend | None
    names: tuple[str, ...]  # backends the listeners reference
    modes: tuple[str | None, ...]  # their modes in the snapshot
    listeners: tuple[HttpListener, ...]
    rejections: tuple[RejectedInput, ...]  # the table's and finalize's
    backends: tuple[BackendSpec, ...] = ()  # the snapshot's: `modes` read them
    missing: frozenset[str] = frozenset()  # of `names`, those not served over HTTP
    finalized: Finalized | None = None  # what the next `finalize_again` starts from


@dataclass(frozen=True, slots=True)
class _L4Final:
    """One workload's TLS passthrough listeners and route TCP frontends as last
    finalized, with what they were made from."""

    routes: WorkloadL4
    modes: tuple[str | None, ...]  # of `routes.names` in the snapshot
    tls: tuple[TlsPassthroughListener, ...]
    tcp: tuple[TcpFrontend, ...]
    rejections: tuple[RejectedInput, ...]


def _port(frontend: TcpFrontend) -> int:
    return frontend.port


@dataclass(frozen=True, slots=True)
class _Proxied:
    """One workload's frontends as last given the settings' PROXY protocol, with what
    they were made from."""

    tcp: tuple[TcpFrontend, ...]
    listeners: tuple[HttpListener, ...]
    http: HttpFrontend | None
    tcp_out: tuple[TcpFrontend, ...]
    listeners_out: tuple[HttpListener, ...]


@dataclass(frozen=True, slots=True)
class _Sectioned:
    """One workload's HTTP listeners and annotation routes as last made to name the
    spare sections their backends run in, with what they were made from."""

    listeners: tuple[HttpListener, ...]
    http: HttpFrontend | None
    sections: dict[str, str]  # a copy of the assembly's
    listeners_out: tuple[HttpListener, ...]
    http_out: HttpFrontend | None
    rules: _RenamedRules
    # The TCP frontends and TLS passthrough listeners: a backend keeps its section when
    # its Service turns to mode tcp (a reload), and these then name it.
    layer4: tuple[tuple[TcpFrontend, ...], tuple[TlsPassthroughListener, ...]] = ((), ())
    layer4_out: tuple[tuple[TcpFrontend, ...], tuple[TlsPassthroughListener, ...]] = ((), ())


# id(rule) -> (the rule, the sections its backends run in, the rule naming them): a rule
# renamed once stays the same object while it and its sections do (the encoder keeps
# its bytes by identity).
_RenamedRules = dict[int, tuple[RouteRule, tuple[str, ...], RouteRule]]


def _rule_in_sections(
    rule: RouteRule, sections: Mapping[str, str], last: _RenamedRules, seen: _RenamedRules
) -> RouteRule:
    used = tuple(sections.get(b.backend, "") for b in rule.backends)
    if not any(used):
        return rule
    hit = last.get(id(rule))
    if hit is None or hit[0] is not rule or hit[1] != used:
        backends = tuple(
            WeightedBackend(section or b.backend, b.weight)
            for b, section in zip(rule.backends, used, strict=True)
        )
        hit = (rule, used, dataclasses.replace(rule, backends=backends))
    seen[id(rule)] = hit
    return hit[2]


def in_sections(
    listeners: tuple[HttpListener, ...],
    sections: Mapping[str, str],
    last: _RenamedRules | None = None,
    seen: _RenamedRules | None = None,
) -> tuple[HttpListener, ...]:
    """The listeners naming, for each backend that runs in a claimed spare, that spare
    (HAProxy knows the section, not the backend's name); `listeners` itself when none
    does. O(rules), a rule renamed in `last` reused (and every renamed rule put in
    `seen`)."""
    last = {} if last is None else last
    seen = {} if seen is None else seen
    out: list[HttpListener] = []
    changed = False
    for listener in listeners:
        rules = tuple(_rule_in_sections(rule, sections, last, seen) for rule in listener.rules)
        listener, moved = _listener_named(listener, rules, sections)
        out.append(listener)
        changed = changed or moved
    return tuple(out) if changed else listeners


def _listener_named(
    listener: HttpListener, rules: tuple[RouteRule, ...], sections: Mapping[str, str]
) -> tuple[HttpListener, bool]:
    """`listener` with `rules` (its own, renamed) and its default backend's section."""
    default = sections.get(listener.default_backend, listener.default_backend)
    if default != listener.default_backend or any(map(is_not, rules, listener.rules)):
        return dataclasses.replace(listener, rules=rules, default_backend=default), True
    return listener, False


def in_sections_again(
    before: tuple[HttpListener, ...],
    before_out: tuple[HttpListener, ...],
    listeners: tuple[HttpListener, ...],
    sections: Mapping[str, str],
    renamed: _RenamedRules,
) -> tuple[HttpListener, ...]:
    """`in_sections` of `listeners` given the same `sections` as `before`, which gave
    `before_out` and `renamed` (updated in place): a listener of the same port and address
    renames only the rules between the common prefix and suffix of its rules and its
    last ones (a route change's), the rest taken from its last output. O(changed)."""
    last_of = {(li.port, li.address): (li, out) for li, out in zip(before, before_out, strict=True)}
    out: list[HttpListener] = []
    changed = False
    for listener in listeners:
        found = last_of.get((listener.port, listener.address))
        if found is None:
            rules = tuple(
                _rule_in_sections(rule, sections, renamed, renamed) for rule in listener.rules
            )
        else:
            old, old_out = found
            head, tail = common_ends(old.rules, listener.rules)
            for rule in old.rules[head : len(old.rules) - tail]:
                renamed.pop(id(rule), None)
            middle = tuple(
                _rule_in_sections(rule, sections, renamed, renamed)
                for rule in listener.rules[head : len(listener.rules) - tail]
            )
            kept = old_out.rules
            rules = (*kept[:head], *middle, *kept[len(kept) - tail :])
        listener, moved = _listener_named(listener, rules, sections)
        out.append(listener)
        changed = changed or moved
    return tuple(out) if changed else listeners


def _http_in_sections(
    http: HttpFrontend | None, sections: Mapping[str, str]
) -> HttpFrontend | None:
    if http is None or not any(r.backend in sections for r in http.routes):
        return http
    routes = tuple(HostRoute(r.host, sections.get(r.backend, r.backend)) for r in http.routes)
    return dataclasses.replace(http, routes=routes)


def _layer4_in_sections(
    tcp: tuple[TcpFrontend, ...],
    tls: tuple[TlsPassthroughListener, ...],
    sections: Mapping[str, str],
) -> tuple[tuple[TcpFrontend, ...], tuple[TlsPassthroughListener, ...]]:
    """The TCP frontends and TLS passthrough listeners naming the sections; the same
    tuples when none names a backend that runs in one."""
    if any(f.backend in sections for f in tcp):
        tcp = tuple(dataclasses.replace(f, backend=sections.get(f.backend, f.backend)) for f in tcp)
    if any(b.backend in sections for lst in tls for r in lst.routes for b in r.backends):
        tls = tuple(
            dataclasses.replace(
                lst,
                routes=tuple(
                    dataclasses.replace(
                        r,
                        backends=tuple(
                            WeightedBackend(sections.get(b.backend, b.backend), b.weight)
                            for b in r.backends
                        ),
                    )
                    for r in lst.routes
                ),
            )
            for lst in tls
        )
    return tcp, tls


def _listener_port(listener: HttpListener) -> tuple[int, str]:
    return listener.port, listener.address


class FinalAssembly:
    """Each workload's listeners as last made consistent with its snapshot (`finalize`),
    by workload key."""

    def __init__(self) -> None:
        self._finals: dict[str, _Final] = {}
        self._l4_finals: dict[str, _L4Final] = {}
        self._proxied: dict[str, _Proxied] = {}
        self._sectioned: dict[str, _Sectioned] = {}

    def complete(
        self,
        key: str,
        snapshot: WorkloadSnapshot,
        routes: WorkloadRoutes,
        l4_routes: WorkloadL4,
        assembly: WorkloadAssembly,
        accept_proxy: bool,
    ) -> tuple[WorkloadSnapshot, tuple[RejectedInput, ...]]:
        """The snapshot with its listeners and route frontends, and the rejections the
        route table and finalizing report for it."""
        snapshot = self._with_routes(key, snapshot, routes, assembly)
        snapshot = self._with_l4(key, snapshot, l4_routes, assembly)
        snapshot = self._with_proxy(key, snapshot, accept_proxy)
        snapshot = self._with_sections(key, snapshot, assembly.sections)
        return snapshot, (*self._finals[key].rejections, *self._l4_finals[key].rejections)

    def keep(self, keys: Iterable[str]) -> None:
        """Forget every workload but `keys` (those of the last computation)."""
        keys = set(keys)
        self._finals = {key: self._finals[key] for key in keys}
        self._l4_finals = {key: self._l4_finals[key] for key in keys}
        self._proxied = {key: self._proxied[key] for key in keys if key in self._proxied}
        self._sectioned = {k: self._sectioned[k] for k in keys if k in self._sectioned}

    def _with_sections(
        self, key: str, snapshot: WorkloadSnapshot, sections: Mapping[str, str]
    ) -> WorkloadSnapshot:
        """The listeners, annotation routes and TCP frontends naming the spare sections
        their backends claimed (`compute/spares.py`). Kept by identity while its inputs
        are, so the encoder reuses their bytes."""
        if not sections:
            self._sectioned.pop(key, None)
            return snapshot
        listeners, http = snapshot.http_listeners, snapshot.http_frontend
        layer4 = (snapshot.tcp_frontends, snapshot.tls_listeners)
        last = self._sectioned.get(key)
        same = last is not None and last.sections == sections
        if last is not None and same and last.http is http and last.listeners is not listeners:
            # A route change under the same claims: its rules renamed alone.
            seen: _RenamedRules = dict(last.rules)
            renamed = in_sections_again(
                last.listeners, last.listeners_out, listeners, sections, seen
            )
            last = dataclasses.replace(last, listeners=listeners, listeners_out=renamed, rules=seen)
        elif last is None or not (same and last.listeners is listeners and last.http is http):
            seen = {}
            renamed = in_sections(listeners, sections, last.rules if last else None, seen)
            http_out = _http_in_sections(http, sections)
            last = _Sectioned(listeners, http, dict(sections), renamed, http_out, seen)
            same = False
        if not (same and last.layer4[0] is layer4[0] and last.layer4[1] is layer4[1]):
            last = dataclasses.replace(
                last, layer4=layer4, layer4_out=_layer4_in_sections(*layer4, sections)
            )
        self._sectioned[key] = last
        tcp, tls = last.layer4_out
        if (
            last.listeners_out is listeners
            and last.http_out is http
            and tcp is layer4[0]
            and tls is layer4[1]
        ):
            return snapshot
        return dataclasses.replace(
            snapshot,
            http_listeners=last.listeners_out,
            http_frontend=last.http_out,
            tcp_frontends=tcp,
            tls_listeners=tls,
        )

    def _with_routes(
        self,
        key: str,
        snapshot: WorkloadSnapshot,
        routes: WorkloadRoutes,
        assembly: WorkloadAssembly,
    ) -> WorkloadSnapshot:
        """The assembled snapshot with the workload's listeners and route warnings. The
        listeners are made consistent with the snapshot (`finalize`) again only when the
        table, the HTTP frontend or a referenced backend's mode changed. The modes are
        read again only when the names or the backends changed (a route change that
        references the same backends reads none)."""
        last = self._finals.get(key)
        names = last.names if last is not None and last.routes is routes else referenced(routes)
        backends = snapshot.backends
        missing: frozenset[str] | None
        if last is not None and last.names == names and last.backends is backends:
            modes, missing = last.modes, last.missing
        else:
            modes = tuple(map(assembly.mode_of, names))
            same = last is not None and last.names == names and last.modes == modes
            missing = last.missing if same and last is not None else None
        http = snapshot.http_frontend
        if (
            last is None
            or last.routes is not routes
            or last.http is not http
            or last.modes != modes
        ):
            if missing is None:
                missing = not_http(names, assembly.mode_of)
            done = finalize_again(
                routes, http, assembly.mode_of, names, missing, last.finalized if last else None
            )
            rejections = (*routes.rejections, *done.rejections)
            last = _Final(
                routes, http, names, modes, done.listeners, rejections, backends, missing, done
            )
            self._finals[key] = last
        elif last.backends is not backends:
            self._finals[key] = last = dataclasses.replace(last, backends=backends)
        if not last.listeners and not last.rejections:
            return snapshot
        return dataclasses.replace(
            snapshot,
            http_listeners=last.listeners,
            certificates=routes.certificates,  # only those its own listeners bind
            warnings=(*snapshot.warnings, *last.rejections),
        )

    def _with_proxy(self, key: str, snapshot: WorkloadSnapshot, accept: bool) -> WorkloadSnapshot:
        """The settings' accept-proxy-protocol on the ports not from Gateways the route
        table leaves out: the Services' `haproxy.org/tcp-port` frontends, and the
        `haproxy.org/hosts` routes' port (a listener without rules of its own where the
        table has none, which takes them as its last layer). Kept by identity while its
        inputs are, so the encoder reuses their bytes."""
        if not accept:
            return snapshot
        tcp, listeners, http = (
            snapshot.tcp_frontends,
            snapshot.http_listeners,
            snapshot.http_frontend,
        )
        last = self._proxied.get(key)
        if last is None or not (
            last.tcp is tcp and last.listeners is listeners and last.http is http
        ):
            tcp_out = tuple(
                f if f.source or f.accept_proxy else dataclasses.replace(f, accept_proxy=True)
                for f in tcp
            )
            out = listeners
            if http is not None and all(lst.port != http.port or lst.address for lst in listeners):
                own = HttpListener(http.port, (), "", accept_proxy=True)
                out = tuple(sorted((*listeners, own), key=_listener_port))
            last = _Proxied(tcp, listeners, http, tcp_out, out)
            self._proxied[key] = last
        if last.tcp_out == tcp and last.listeners_out is listeners:
            return snapshot
        return dataclasses.replace(
            snapshot, tcp_frontends=last.tcp_out, http_listeners=last.listeners_out
        )

    def _with_l4(
        self,
        key: str,
        snapshot: WorkloadSnapshot,
        routes: WorkloadL4,
        assembly: WorkloadAssembly,
    ) -> WorkloadSnapshot:
        """The snapshot with the workload's TLS passthrough listeners and route TCP
        frontends (made consistent with its backends' modes, `l4.finalize`)."""
        last = self._l4_finals.get(key)
        modes = tuple(map(assembly.mode_of, routes.names))
        if last is None or last.routes is not routes or last.modes != modes:
            tls, tcp, added = finalize_l4(routes, assembly.mode_of)
            last = _L4Final(routes, modes, tls, tcp, (*routes.rejections, *added))
            self._l4_finals[key] = last
        if not (last.tls or last.tcp or last.rejections):
            return snapshot
        frontends = snapshot.tcp_frontends
        if last.tcp:
            frontends = tuple(sorted((*frontends, *last.tcp), key=_port))
        return dataclasses.replace(
            snapshot,
            tls_listeners=last.tls,
            tcp_frontends=frontends,
            warnings=(*snapshot.warnings, *last.rejections),
        )
