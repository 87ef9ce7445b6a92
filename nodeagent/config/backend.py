"""One `backend` section: balance, hash type, stick table, health checks and the server
slots, every value checked against the shared vocabulary (`peerplane.balance`,
`healthcheck`, `limits`, `names`); which keywords are written depends on the HAProxy
version (`nodeagent/haproxy/version.py`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable

from nodeagent.config.checked import check, endpoint
from nodeagent.config.errors import RenderError, refused
from nodeagent.config.filters import timeouts
from nodeagent.haproxy import version
from peerplane import balance as words
from peerplane import healthcheck, limits, names, session
from peerplane.addresses import is_canonical_ipv4
from peerplane.v1 import peerplane_pb2 as pb

PEERS_SECTION = names.PEERS_SECTION
_PROXY_NAME = limits.PROXY_NAME
_PARAM = words.PARAM_NAME
_HEADER = words.HEADER_NAME


def haproxy_size(value: int) -> str:
    """Largest exact power-of-1024 suffix, as HAProxy reads sizes."""
    if value <= 0:
        raise RenderError(f"invalid stick-table size: {value}")
    for suffix, factor in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def _balance(backend: pb.Backend) -> str:
    algo, arg = backend.balance, backend.balance_argument
    if algo in words.PLAIN_ALGORITHMS:
        if arg:
            raise refused(
                backend.name, arg, f"backend {backend.name}: balance {algo} takes no argument"
            )
        return algo
    if algo == "url_param":
        return f"url_param {check(_PARAM, arg, f'backend {backend.name}: balance url_param name')}"
    if algo == "hdr":
        return f"hdr({check(_HEADER, arg, f'backend {backend.name}: balance header name')})"
    raise refused(backend.name, algo, f"backend {backend.name}: invalid balance {algo!r}")


def _hash_type(value: str, backend: str) -> str:
    try:
        return words.canonical_hash_type(value)
    except ValueError:
        raise refused(backend, value, f"backend {backend}: invalid hash-type: {value!r}") from None


def _server(backend: str, slot: pb.Slot, options: str = "", cookie: bool = False) -> str:
    if names.server_index(slot.server_name) != slot.index:
        raise RenderError(f"backend {backend}: slot {slot.index} named {slot.server_name!r}")
    if slot.index > limits.MAX_SLOTS:  # the bound compute and the slot loaders hold too
        raise refused(
            backend, slot.index, f"backend {backend}: slot {slot.index} above {limits.MAX_SLOTS}"
        )
    if cookie:  # the slot's name: the same pod on every instance (docs/design.md)
        options = f" cookie {slot.server_name}{options}"
    if slot.enabled:
        try:
            addr = endpoint(slot.address, slot.port)
        except RenderError as e:  # which tenant's backend: the NACK says
            raise RenderError(f"backend {backend}: slot {slot.index}: {e}") from None
        return f"  server {slot.server_name} {addr} id {slot.index} enabled{options}"
    return f"  server {slot.server_name} 127.0.0.1:1 id {slot.index} disabled{options}"


def _healthcheck(backend: pb.Backend, name: str) -> tuple[list[str], str]:
    """Backend lines and the server-line suffix of the backend's health checks.

    Free slots get the suffix too: HAProxy never checks a server in maintenance, and one
    that leaves it through the runtime API (`set server ... state ready`) is checked from
    then on only if it was declared with `check`.
    """
    if not backend.HasField("check"):
        return [], ""
    c = backend.check
    if not healthcheck.is_interval_ms(c.interval_ms):
        raise refused(
            name, c.interval_ms, f"backend {name}: invalid check interval {c.interval_ms}"
        )
    if not healthcheck.is_count(c.rise) or not healthcheck.is_count(c.fall):
        raise refused(name, 0, f"backend {name}: invalid check rise {c.rise} / fall {c.fall}")
    lines: list[str] = []
    if c.http_path:
        if not healthcheck.is_path(c.http_path):
            raise RenderError(f"backend {name}: invalid check-http {c.http_path!r}")
        if backend.mode != "http":  # a valid path on a TCP backend
            raise refused(name, 0, f"backend {name}: invalid check-http {c.http_path!r}")
        lines = [f"  option httpchk GET {c.http_path}", "  http-check expect status 200-399"]
    return lines, f" check inter {c.interval_ms} rise {c.rise} fall {c.fall}"


def _protocol(backend: pb.Backend, name: str, http_check: bool) -> str:
    """The server-line options of the backend's protocol: `proto h2` (cleartext HTTP/2,
    its HTTP checks too), or TLS not verified for WebSocket over TLS (a pod's certificate
    is signed by no CA anyone told us of; docs/annotations.md, "Backend protocol")."""
    protocol = backend.protocol
    if protocol not in names.BACKEND_PROTOCOLS:
        raise RenderError(f"backend {name}: invalid protocol {protocol!r}")
    if protocol and backend.mode != "http":
        raise RenderError(f"backend {name}: protocol {protocol} in mode {backend.mode}")
    if protocol == "h2":
        return " proto h2" + (" check-proto h2" if http_check else "")
    if protocol == "wss":
        return " ssl verify none" + (" check-ssl" if backend.HasField("check") else "")
    return ""


def _session_cookie(backend: pb.Backend, name: str) -> str:
    """The `cookie` line: inserted by HAProxy, never passed to the server, not cached;
    a session cookie carries no Expires or Max-Age, a Permanent one Max-Age."""
    c = backend.session_cookie
    if backend.mode != "http":
        raise RenderError(f"backend {name}: session cookie in mode {backend.mode}")
    cookie = check(session.COOKIE_NAME, c.name, f"backend {name}: session cookie name")
    line = f"  cookie {cookie} insert indirect nocache"
    for word, value in (("maxidle", c.max_idle_s), ("maxlife", c.max_life_s)):
        if value > session.MAX_LIFETIME_S:
            raise RenderError(f"backend {name}: cookie {word} {value} above the limit")
        if value:
            line += f" {word} {value}s"
    if c.max_age_s > session.MAX_LIFETIME_S:
        raise RenderError(f"backend {name}: cookie Max-Age {c.max_age_s} above the limit")
    if c.max_age_s:
        line += f" attr Max-Age={c.max_age_s}"
    return line


def _session_header(
    backend: pb.Backend, name: str, peers: bool, haproxy_version: version.Version | None
) -> list[str]:
    """A stick table keyed by the header's value (its first HEADER_KEY_LEN bytes)."""
    h = backend.session_header
    if backend.HasField("persistence"):
        raise RenderError(f"backend {name}: header persistence beside source-IP persistence")
    header = check(session.HEADER_NAME, h.name, f"backend {name}: session header name")
    if not 0 < h.expire_ms <= limits.MAX_EXPIRE_MS:
        raise RenderError(f"backend {name}: invalid expire {h.expire_ms}")
    if h.table_size > limits.MAX_TABLE_SIZE:
        raise RenderError(f"backend {name}: stick-table size above {limits.MAX_TABLE_SIZE}")
    table = (
        f"  stick-table type string len {session.HEADER_KEY_LEN} "
        f"size {haproxy_size(h.table_size)} expire {h.expire_ms}"
    )
    if version.srvkey_addr(haproxy_version):
        table += " srvkey addr"
    if peers:
        table += f" peers {PEERS_SECTION}"
    return [f"  stick on req.hdr({header})", table]


def section_name(backend: pb.Backend) -> str:
    """The HAProxy section `backend` runs in: the spare it claimed, else its name. A spare
    (claimed, or unclaimed: `spare`) must be named `spare.<n>` (docs/design.md, "Spare
    backends"), so it never takes another backend's name."""
    name = check(_PROXY_NAME, backend.name, "backend name")
    if backend.section:
        if backend.spare or names.spare_index(backend.section) is None:
            raise RenderError(f"backend {name}: invalid spare section")
        return backend.section
    if backend.spare and names.spare_index(name) is None:
        raise RenderError(f"backend {name}: a spare not named spare.<n>")
    return name


def render_backend(
    backend: pb.Backend,
    peers: bool = True,
    haproxy_version: version.Version | None = None,
    timed: bool = False,
) -> list[str]:
    """One `backend` section; `peers` says whether the stick table is replicated,
    `haproxy_version` which version-dependent keywords may be written, `timed` whether a
    frontend sets a route rule's timeouts (an HTTP backend applies them only then)."""
    name = section_name(backend)
    if backend.mode not in names.MODES:
        raise refused(name, backend.mode, f"backend {name}: invalid mode {backend.mode!r}")
    lines = [f"backend {name}"]
    if backend.mode == "tcp":
        lines.append("  mode tcp")
    elif timed:  # a route rule's timeouts, set by its frontend (config/filters/timeouts.py)
        lines.append(timeouts.BACKEND_LINE)
    lines.append(f"  balance {_balance(backend)}")
    if backend.hash_type:
        lines.append(f"  hash-type {_hash_type(backend.hash_type, name)}")
    if backend.HasField("persistence"):
        p = backend.persistence
        if not 0 < p.expire_ms <= limits.MAX_EXPIRE_MS:
            raise refused(name, p.expire_ms, f"backend {name}: invalid expire {p.expire_ms}")
        if not 0 < p.table_size <= limits.MAX_TABLE_SIZE:
            raise refused(
                name, p.table_size, f"backend {name}: invalid stick-table size {p.table_size}"
            )
        table = f"  stick-table type ip size {haproxy_size(p.table_size)} expire {p.expire_ms}"
        if version.srvkey_addr(haproxy_version):
            table += " srvkey addr"
        if peers:
            table += f" peers {PEERS_SECTION}"
        lines += ["  stick on src", table]
    if backend.HasField("session_header"):
        lines += _session_header(backend, name, peers, haproxy_version)
    cookie = backend.HasField("session_cookie")
    if cookie:
        lines.append(_session_cookie(backend, name))
    check_lines, options = _healthcheck(backend, name)
    lines += check_lines
    options = _protocol(backend, name, bool(check_lines)) + options
    if backend.hash_type.startswith("consistent") and version.hash_key_addr_port(haproxy_version):
        options = " hash-key addr-port" + options
    return lines + _servers(name, backend.slots, options, cookie)


def _servers(backend: str, slots: Iterable[pb.Slot], options: str, cookie: bool) -> list[str]:
    """The server lines in slot order, each as `_server` writes it. The usual slot (named
    `SRV_<index>` within the limit, free or at a canonical IPv4 address and a valid port)
    is written in this loop without a call of its own: 336,000 lines at 8,000 Services are
    most of an agent's first render (docs/findings.md, "HAProxy 2.6's first start at 8,000
    Services"). Any other slot goes through `_server`, which checks it and words its error."""
    lines: list[str] = []
    seen: set[int] = set()
    for slot in sorted(slots, key=_slot_index):
        index = slot.index
        if index in seen:
            raise RenderError(f"backend {backend}: duplicate slot {index}")
        seen.add(index)
        server = slot.server_name
        # `names.server_index(server) == index` for an index within the limit
        if not (0 < index <= limits.MAX_SLOTS and server == _SERVER_NAMES[index]):
            lines.append(_server(backend, slot, options, cookie))
            continue
        suffix = f" cookie {server}{options}" if cookie else options
        if not slot.enabled:
            lines.append(f"  server {server} 127.0.0.1:1 id {index} disabled{suffix}")
        elif 0 < slot.port <= 65535 and is_canonical_ipv4(slot.address):
            # `checked.endpoint`: a canonical IPv4 address is its own canonical text
            lines.append(f"  server {server} {slot.address}:{slot.port} id {index} enabled{suffix}")
        else:
            lines.append(_server(backend, slot, options, cookie))
    return lines


# `names.server_name(index)` of every index within the limit, looked up per slot
_SERVER_NAMES = tuple(names.server_name(index) for index in range(limits.MAX_SLOTS + 1))
_slot_index = operator.attrgetter("index")  # in C: the sort's key of 336,000 slots
