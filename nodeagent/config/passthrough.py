"""Layer-4 frontends: TLS passthrough listeners routed by SNI, TCP frontends, and the
PROXY protocol on every bind.

Pure. A passthrough listener is a `mode tcp` frontend that waits (`inspect-delay`) for
the ClientHello, takes its SNI and picks the backend through a map file beside
haproxy.cfg, with the HTTP host layers' semantics (nodeagent/config/listeners.py): the exact
name, then each `*.suffix` from the longest (looked up by the last N labels, only when the
name has more than N: a wildcard never matches its bare suffix), then the routes for any
name. No match, an unresolved backend or no TLS at all: the connection is closed. The TLS
session goes on to the backend pod untouched.

A route with one backend is a map entry (`<name> <backend>`), changed through the
runtime API like an HTTP map rule; a route with weights is a map entry naming a group
(`_w<n>`) that lines of the frontend split by `rand(total)`, as HTTP config rules do. The
frontend's text changes only for ports, wildcard depths above 3, weight groups and
`accept-proxy`: those reload.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from nodeagent.config.checked import DIRECTORY, check
from nodeagent.config.errors import RenderError
from nodeagent.config.layers import wildcard_depth
from nodeagent.config.listeners import WILDCARD_DEPTHS, MapEntries
from nodeagent.config.rules import ANY_HOST, checked_backend_name
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb

TLS_LISTENER = "TLS passthrough listener"
TCP_FRONTEND = "TCP frontend"
INSPECT_DELAY = "5s"  # how long a client may take to send its ClientHello
MAX_ROUTES = 100_000
ACCEPT_PROXY = " accept-proxy"
_WEIGHT_TOTAL = 1 << 31
# Map values and variable contents that are no backend: a proxy name starts with a letter
# or digit, these with "_".
_CLOSED = "_closed"
_GROUP = "_w"
_UNDECIDED = "!{ var(txn.be) -m found }"


@dataclass(frozen=True)
class Layer4:
    """The TLS passthrough and TCP frontends: their config lines, the SNI map files (path
    -> entries), the backends the SNI routes name, and each frontend's text and kind by
    port (what a change compares to know whether it can go through the runtime API)."""

    lines: tuple[str, ...]
    maps: Mapping[str, MapEntries]
    backends: frozenset[str]
    texts: Mapping[int, str]
    kinds: Mapping[int, str]


def proxy_option(accept_proxy: bool) -> str:
    """The bind option of a port that expects a PROXY protocol header (v1 or v2)."""
    return ACCEPT_PROXY if accept_proxy else ""


def sni_map_path(maps_dir: str, port: int) -> str:
    return f"{maps_dir}/fe_{port}.sni.map"


def frontend_name(port: int) -> str:
    return f"fe_tls_{port}"


def render(
    tls_listeners: Sequence[pb.TlsPassthroughListener],
    tcp_frontends: Sequence[pb.TcpFrontend],
    maps_dir: str,
    bind: Callable[[int], str],
) -> Layer4:
    """The frontends of the passthrough listeners, then of the TCP frontends, by port."""
    if tls_listeners:
        check(DIRECTORY, maps_dir, "maps directory")
    lines: list[str] = []
    maps: dict[str, MapEntries] = {}
    backends: set[str] = set()
    texts: dict[int, str] = {}
    kinds: dict[int, str] = {}
    for listener in sorted(tls_listeners, key=lambda li: li.port):
        port = _port(listener.port, TLS_LISTENER)
        if port in texts:
            raise RenderError(f"two TLS passthrough listeners on port {port}")
        section, entries, named = _passthrough(listener, sni_map_path(maps_dir, port), bind)
        maps[sni_map_path(maps_dir, port)] = entries
        backends |= named
        lines += section
        texts[port], kinds[port] = "\n".join(section), TLS_LISTENER
    for fe in sorted(tcp_frontends, key=lambda f: f.port):
        port = _port(fe.port, TCP_FRONTEND)
        if port in texts:
            raise RenderError(f"{kinds[port]} on TCP frontend port {port}")
        section = [
            f"frontend fe_tcp_{port}",
            "  mode tcp",
            f"  bind {bind(port)}{proxy_option(fe.accept_proxy)}",
            f"  default_backend {checked_backend_name(fe.backend)}",
            "",
        ]
        lines += section
        texts[port], kinds[port] = "\n".join(section), TCP_FRONTEND
    return Layer4(tuple(lines), maps, frozenset(backends), texts, kinds)


def _port(port: int, what: str) -> int:
    if not 1 <= port <= 65535:
        raise RenderError(f"invalid {what} port: {port}")
    return port


def _hostnames(route: pb.SniRoute) -> list[str]:
    for host in route.hostnames:
        if not patterns.is_route_host(host):
            raise RenderError(f"route {route.source[:200]!r}: invalid hostname: {host!r}")
    return list(dict.fromkeys(route.hostnames)) or [ANY_HOST]


def _passthrough(
    listener: pb.TlsPassthroughListener, map_path: str, bind: Callable[[int], str]
) -> tuple[list[str], dict[str, str], set[str]]:
    """One listener's frontend, its SNI map's entries and the backends it names."""
    port = listener.port
    if len(listener.routes) > MAX_ROUTES:
        raise RenderError(f"TLS passthrough listener {port}: more than {MAX_ROUTES} routes")
    entries: dict[str, str] = {}
    named: set[str] = set()
    groups: list[str] = []  # the weight lines of each route with more than one backend
    count = 0
    for route in listener.routes:
        tokens = _hostnames(route)
        value, group = _target(route, count, named)
        if group:
            groups += group
            count += 1
        for token in tokens:
            entries.setdefault(token, value)  # the first route of a name serves it
    wildcards = {wildcard_depth(t) for t in entries if t.startswith(patterns.WILDCARD_PREFIX)}
    lines = [
        f"frontend {frontend_name(port)}",
        "  mode tcp",
        f"  bind {bind(port)}{proxy_option(listener.accept_proxy)}",
        f"  tcp-request inspect-delay {INSPECT_DELAY}",
        "  tcp-request content reject if !{ req.ssl_hello_type 1 }",
        "  tcp-request content set-var(txn.h) req.ssl_sni,lower if { req.ssl_sni -m found }",
        f"  tcp-request content set-var(txn.be) var(txn.h),map_str({map_path})"
        " if { var(txn.h) -m found } !{ var(txn.h) -m sub * }",
    ]
    for depth in sorted({*WILDCARD_DEPTHS, *wildcards}, reverse=True):
        lines += [
            "  tcp-request content unset-var(txn.w)",
            f"  tcp-request content set-var(txn.w) var(txn.h),field(-1,.,{depth}) if {_UNDECIDED}"
            f" {{ var(txn.h),field(-{depth + 1},.) -m len gt 0 }}",
            f"  tcp-request content set-var(txn.be) str(*.),concat(,txn.w,),map_str({map_path})"
            f" if {_UNDECIDED} {{ var(txn.w) -m found }}",
        ]
    lines += [
        f"  tcp-request content set-var(txn.be) str({ANY_HOST}),map_str({map_path})"
        f" if {_UNDECIDED}",
        *groups,
        f"  tcp-request content reject if {_UNDECIDED}",
        "  tcp-request content reject if { var(txn.be) -m beg _ }",
        "  tcp-request content accept if { req.ssl_hello_type 1 }",
        "  use_backend %[var(txn.be)]",
        "",
    ]
    return lines, dict(sorted(entries.items())), named


def _target(route: pb.SniRoute, group: int, named: set[str]) -> tuple[str, list[str]]:
    """A route's map value: its backend, a weight group with the lines that pick one of
    its backends by `rand(total)`, or closed (no backend with weight, an unresolved one)."""
    served = [b for b in route.backends if b.weight > 0]
    for b in route.backends:
        if b.weight > patterns.MAX_WEIGHT:
            raise RenderError(f"route {route.source[:200]!r}: invalid weight: {b.weight}")
        if b.backend:
            checked_backend_name(b.backend)
    total = sum(b.weight for b in served)
    if not served or total >= _WEIGHT_TOTAL:
        return _CLOSED, []
    if len(served) == 1:
        if not served[0].backend:
            return _CLOSED, []
        named.add(served[0].backend)
        return served[0].backend, []
    gid = f"{_GROUP}{group}"
    won = f"{{ var(txn.be) -m str {gid} }}"
    lines = [f"  tcp-request content set-var(txn.rnd) rand({total}) if {won}"]
    upto = 0
    for b in served:
        upto += b.weight
        target = b.backend or _CLOSED
        if b.backend:
            named.add(b.backend)
        lines.append(
            f"  tcp-request content set-var(txn.be) str({target}) if {won}"
            f" {{ var(txn.rnd) -m int lt {upto} }}"
        )
    return gid, lines
