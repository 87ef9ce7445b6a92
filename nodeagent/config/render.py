"""Snapshot -> haproxy.cfg text.

Pure: no I/O. Every string taken from the snapshot is re-checked against a strict pattern
before it is written, so a bug or a compromise upstream cannot inject configuration.
The output is deterministic: agents of one workload differ only in the `localpeer` line and
in the per-instance options (bind address, runtime socket, the directory of the route maps).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from nodeagent.config import certs, listeners, passthrough, rules
from nodeagent.config.backend import haproxy_size, render_backend, section_name
from nodeagent.config.checked import check, endpoint
from nodeagent.config.checked import host as checked_host
from nodeagent.config.errors import RenderError
from nodeagent.config.filters import timeouts
from nodeagent.config.layers import GroupJoin
from nodeagent.haproxy import version
from nodeagent.held import ChangeSet, DeltaError, Held
from peerplane import limits, names
from peerplane.v1 import peerplane_pb2 as pb

__all__ = [
    "RenderError",
    "RenderOptions",
    "Rendered",
    "haproxy_size",
    "render",
    "render_backend",
    "render_held",
]

PEERS_SECTION = names.PEERS_SECTION  # re-exported: the applier checks HAProxy runs it
HTTP_FRONTEND = listeners.HTTP_FRONTEND

# The names and words compute emits, from the shared vocabulary: it never emits what we
# refuse, and we refuse what it would never emit.
_POD_NAME = names.DNS_SUBDOMAIN
_PROXY_NAME = limits.PROXY_NAME
_SOCKET_PATH = re.compile(r"^/[A-Za-z0-9_./-]{1,106}$")
_TIME = re.compile(r"^[0-9]{1,6}(ms|s|m|h)$")
_WORKLOAD = limits.WORKLOAD_KEY
_HASH = re.compile(r"^[0-9a-f]{0,128}$")


@dataclass(frozen=True)
class RenderOptions:
    """Per-instance inputs that are not part of the shared snapshot."""

    pod_name: str
    bind_address: str = "0.0.0.0"
    runtime_socket: str = "/var/run/haproxy/runtime.sock"
    maxconn: int = 4096
    hard_stop_after: str = "60s"
    # (major, minor) of the HAProxy that serves: it decides `srvkey addr` and `hash-key
    # addr-port`. None renders only what every version accepts (neither of them).
    haproxy_version: version.Version | None = None
    # Where the route model's map files are (the applier: beside haproxy.cfg); haproxy.cfg
    # names them, HAProxy reads them at a start or reload.
    maps_dir: str = "/etc/haproxy/maps"
    # Where the certificates and the HTTPS listeners' crt-lists are (the applier: beside
    # haproxy.cfg), as `maps_dir`.
    certs_dir: str = "/etc/haproxy/certs"


def _global(opts: RenderOptions) -> list[str]:
    return [
        "global",
        f"  localpeer {check(_POD_NAME, opts.pod_name, 'pod name')}",
        f"  stats socket {check(_SOCKET_PATH, opts.runtime_socket, 'socket path')}"
        " mode 600 level admin expose-fd listeners",
        "  stats timeout 30s",
        f"  maxconn {int(opts.maxconn)}",
        f"  hard-stop-after {check(_TIME, opts.hard_stop_after, 'time')}",
        "",
        "defaults",
        "  mode http",
        "  option redispatch",
        "  retries 3",
        "  timeout connect 5s",
        "  timeout client 30s",
        "  timeout server 30s",
        "  timeout http-request 10s",
        "  timeout http-keep-alive 10s",
        "  timeout queue 30s",
        "  timeout tunnel 1h",
        "",
    ]


def _peers(section: pb.PeerSection | None) -> list[str]:
    if section is None or not section.peers:
        return []
    if section.name != PEERS_SECTION:
        raise RenderError(f"invalid peers section name: {section.name!r}")
    lines = [f"peers {PEERS_SECTION}"]
    for peer in sorted(section.peers, key=lambda p: p.name):
        name = check(_POD_NAME, peer.name, "peer name")
        lines.append(f"  peer {name} {endpoint(peer.address, peer.port or section.port, 'peer')}")
    return [*lines, ""]


def _bind(opts: RenderOptions, port: int) -> str:
    return endpoint(opts.bind_address, port, "bind")


def _http_frontend(fe: pb.HttpFrontend | None, opts: RenderOptions) -> list[str]:
    if fe is None:
        return []
    lines = [f"frontend {HTTP_FRONTEND}", "  mode http", f"  bind {_bind(opts, fe.port)}"]
    for route in sorted(fe.routes, key=lambda r: (r.host, r.backend)):
        name = checked_host(route.host)
        backend = check(_PROXY_NAME, route.backend, "backend name")
        lines.append(f"  use_backend {backend} if {{ hdr(host),field(1,:),lower -m str {name} }}")
    return [*lines, ""]


@dataclass(frozen=True)
class Frontends:
    """The frontends section with what else it was rendered into: the route model's map
    files and the backends the routes name; kept while both its parts are unchanged."""

    frontends_key: bytes
    listeners_key: bytes
    section: Section
    maps: Mapping[str, listeners.MapEntries]
    routed: frozenset[str]
    texts: Mapping[str, str]  # each listener frontend's text, by listener key
    crt_lists: certs.CrtLists = field(default_factory=dict)  # HTTPS listeners' crt-lists
    tls_key: bytes = b""  # the TLS passthrough listeners' part
    layer4: passthrough.Layer4 | None = None  # the passthrough and TCP frontends
    set_aside: frozenset[str] = frozenset()  # certificates left out of the crt-lists
    rules_aside: frozenset[str] = frozenset()  # route rules not rendered, by fingerprint
    # (source, reason) of the route rules rendered as 500s for fields the agent does not
    # know (`rules.unknown_fields_aside`)
    unknown_aside: tuple[tuple[str, str], ...] = ()
    # Each listener frontend's config rules by name ("c0"), by frontend name.
    config_rules: Mapping[str, Mapping[str, pb.RouteRule]] = field(default_factory=dict)
    # The listeners' checked rules and host layers, handed to the next render.
    route_cache: rules.RouteCache = field(
        default_factory=rules.RouteCache, compare=False, repr=False
    )
    # The route groups' framed bytes it was rendered from (contract 2), by key, and the
    # listeners' layers joined from the groups', handed to the next render.
    groups_key: Mapping[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    group_join: GroupJoin = field(default_factory=GroupJoin, compare=False, repr=False)
    # Each listener's (exact, prefix) map files by name, when rendered from its groups'
    # layers (`listeners.RoutedFrontends.group_maps`).
    group_maps: Mapping[str, tuple[str, str]] | None = None


def _sweep(cache: rules.RouteCache, held: Held, previous: Frontends | None) -> None:
    """The route cache kept to the groups held now and rendered last (`RouteCache.sweep`):
    O(1) per render until a sweep is due."""
    now = held.parts.route_groups
    last = previous.groups_key if previous is not None else {}
    if cache.sweep_due(len(now)):
        cache.sweep({*now.values(), *last.values()})


def _frontends(
    held: Held,
    opts: RenderOptions,
    set_aside: frozenset[str],
    cache: rules.RouteCache,
    rules_aside: frozenset[str] = frozenset(),
    previous: Frontends | None = None,
    changed: frozenset[str] | None = None,
) -> Frontends:
    """HTTP frontends (a listener's port takes the annotation routes of the same port as
    its last layer; otherwise they keep their own frontend), TLS passthrough and TCP
    frontends (nodeagent/config/passthrough.py)."""
    http, http_listeners = held.http_frontend, held.http_listeners
    ports = {listener.port for listener in http_listeners}
    shared = {listener.port for listener in http_listeners if not listener.address}
    merged = http if http is not None and http.port in shared else None
    crt_lists = certs.crt_lists(http_listeners, set_aside)
    strict = certs.strict_sni_ports(http_listeners)

    def proxy_bind(listener: pb.HttpListener) -> str:
        """A listener's bind line after `bind`: its own address (a Gateway's) or the
        instance's, the port, then its TLS options and `accept-proxy` where it expects
        a PROXY protocol header."""
        key = listeners.listener_key(listener)
        tls = certs.bind_tls(opts.certs_dir, key, crt_lists, key in strict)
        address = listener.address or opts.bind_address
        proxy = passthrough.proxy_option(listener.accept_proxy)
        return endpoint(address, listener.port, "bind") + tls + proxy

    join = previous.group_join if previous is not None else GroupJoin()
    routed = listeners.render_listeners(
        http_listeners,
        merged,
        opts.maps_dir,
        proxy_bind,
        cache,
        rules_aside,
        held.route_groups,
        held.parts.route_groups,
        changed,
        previous.groups_key if previous is not None else None,
        join,
    )
    _sweep(cache, held, previous)
    layer4 = passthrough.render(
        held.tls_listeners, held.tcp_frontends, opts.maps_dir, lambda port: _bind(opts, port)
    )
    both = ports & layer4.kinds.keys()
    if both:
        raise RenderError(f"HTTP listener on {layer4.kinds[min(both)]} port {min(both)}")
    legacy = _http_frontend(http, opts) if merged is None else []
    lines = legacy + list(routed.lines) + list(layer4.lines)
    return Frontends(
        held.frontends_part,
        held.listeners_part,
        _section(held.frontends_part, lines),
        {**routed.maps, **layer4.maps},
        routed.backends | layer4.backends,
        routed.texts,
        crt_lists,
        tls_key=held.parts.tls_listeners,
        layer4=layer4,
        set_aside=set_aside,
        rules_aside=rules_aside,
        unknown_aside=routed.unknown_aside,
        config_rules=routed.config_rules,
        route_cache=cache,
        groups_key=held.parts.route_groups,
        group_join=join,
        group_maps=routed.group_maps,
    )


def _reusable_frontends(
    previous: Frontends,
    held: Held,
    set_aside: frozenset[str],
    rules_aside: frozenset[str],
    groups_moved: bool | None = None,
) -> Frontends | None:
    """`previous` when nothing its section is made of changed. `groups_moved`: whether
    a route group differs from those `previous` was rendered from, as the delta's change
    set says (None: not known, the groups are compared: O(groups))."""
    same = _reusable(previous.section, held.frontends_part) is not None
    same = same and previous.set_aside == set_aside and previous.rules_aside == rules_aside
    listeners, tls = held.listeners_part, held.parts.tls_listeners
    same = same and (previous.listeners_key is listeners or previous.listeners_key == listeners)
    groups = held.parts.route_groups  # equal maps: each value compared by identity first
    if groups_moved is None:
        same = same and (previous.groups_key is groups or previous.groups_key == groups)
    else:
        same = same and not groups_moved
    if same and (previous.tls_key is tls or previous.tls_key == tls):
        return previous
    return None


def _text(lines: list[str]) -> str:
    return "\n".join(lines)


@dataclass(frozen=True)
class Section:
    """One rendered section kept for reuse: the held part it was rendered from (`key`),
    its text, and its text as UTF-8 (encoded once, joined into the file on every change)."""

    key: bytes
    text: str
    data: bytes


def _section(key: bytes, lines: list[str]) -> Section:
    text = _text(lines)
    return Section(key, text, text.encode())


def _reusable(previous: Section | None, key: bytes) -> Section | None:
    """`previous` when rendered from the same part: the same bytes object after a delta
    that left it alone, equal bytes (one memcmp) after a full snapshot."""
    if previous is not None and (previous.key is key or previous.key == key):
        return previous
    return None


@dataclass(frozen=True)
class Rendered:
    """A config in sections: the sections of unchanged parts are reused by the next
    render, and the file is their join (docs/design.md, "Deltas on the agent side, and
    the render cache"). A backend's section is keyed by its framed bytes and by
    whether peers exist (`peered`), the peers and frontends sections by their serialized
    parts; every section depends on `options` too, so a render with other options reuses
    nothing. `content_hash` names the snapshot rendered: the base of a change set that
    may be rendered from this one in O(changed backends)."""

    header: str
    global_section: Section
    peers_section: Section
    routed: Frontends  # the frontends section, the map files and the backends routes name
    peered: bool
    timed: bool  # a route rule sets timeouts: the HTTP backends apply them (`sets_timeouts`)
    names: tuple[str, ...]
    keys: Mapping[str, bytes]
    # Each backend's section, kept only as the UTF-8 written (27 MB at 8,000 Services):
    # the text is needed only to validate a reload, which decodes the joined file once.
    encoded: Mapping[str, bytes]
    content_hash: str
    options: RenderOptions
    # The backends set aside (the applier's choice: HAProxy refused them), each rendered
    # as an empty section of its name (`stub_backend`).
    stubbed: frozenset[str] = frozenset()
    # The claimed spare sections: section -> the backend (held name) that runs in it
    # (docs/design.md, "Spare backends"); the routes name the section.
    sections: Mapping[str, str] = field(default_factory=dict)

    @property
    def peers(self) -> str:
        return self.peers_section.text

    @property
    def frontends_section(self) -> Section:
        return self.routed.section

    @property
    def frontends(self) -> str:
        return self.frontends_section.text

    @property
    def maps(self) -> Mapping[str, listeners.MapEntries]:
        """The route model's map files: path -> entries, written beside haproxy.cfg."""
        return self.routed.maps

    @property
    def crt_lists(self) -> certs.CrtLists:
        """The HTTPS listeners' crt-lists by port, written beside haproxy.cfg."""
        return self.routed.crt_lists

    def backend(self, name: str) -> str:
        """One backend's section."""
        return self.encoded[name].decode()

    def text(self) -> str:
        """The whole haproxy.cfg."""
        return self.data().decode()

    def data(self) -> bytes:
        """The whole haproxy.cfg as the bytes written: `text()` encoded, but from sections
        encoded once each (a 27 MB file is joined, not encoded again, per change), the
        backends taken in order at C speed (`map`, no Python frame per backend)."""
        return b"\n".join(self._sections())

    def pieces(self) -> list[bytes]:
        """`data()` in pieces, its sections and the newlines between them, to be written
        in order (`durable.atomic_write`): no second copy of the whole file (16 MB at
        8,000 Services) to hold through the write on every change."""
        parts = self._sections()
        out = [b"\n"] * (2 * len(parts) - 1)
        out[::2] = parts
        return out

    def _sections(self) -> list[bytes]:
        """The file's sections in order, each encoded once: the header, the fixed
        sections that have content, then the backends."""
        fixed = (self.global_section, self.peers_section, self.frontends_section)
        head = [self.header.encode(), *(s.data for s in fixed if s.data)]
        return [*head, *map(self.encoded.__getitem__, self.names)]


def _backend_text(backend: pb.Backend, peered: bool, timed: bool, opts: RenderOptions) -> str:
    return _text([*render_backend(backend, peered, opts.haproxy_version, timed), ""])


def sets_timeouts(frontends: Frontends) -> bool:
    """Whether a rendered route rule sets `txn.tmo` (its timeouts): only then do the HTTP
    backends need the line that applies it (8,000 backends: 600 KB of the file and a rule
    each HAProxy parses and evaluates per request, for nothing without such a rule); the
    frontends section is searched at C speed, once per render of it."""
    return timeouts.SETTER.encode() in frontends.section.data


def stub_backend(backend: pb.Backend) -> str:
    """A backend set aside: a section of its name and mode without servers, so that the
    routes and frontends naming it stay valid and its requests are answered 503 (HTTP) or
    closed (TCP), never passed to another backend."""
    name = section_name(backend)  # a claimed spare's section, else its own name
    mode = ["  mode tcp"] if backend.mode == "tcp" else []
    return _text([f"backend {name}", *mode, "  # set aside: refused, the ACK says why", ""])


def _set_aside_backends(
    held: Held,
    opts: RenderOptions,
    backends: _Backends,
    previous: Rendered | None,
    aside: frozenset[str],
    timed: bool,
) -> frozenset[str]:
    """Turn the sections of the backends `aside` into stubs, and those stubbed by
    `previous` but no longer aside back into backends (a reused section may be a stub)."""
    stubbed = aside & held.backends.keys()
    back = (previous.stubbed if previous is not None else frozenset()) - stubbed
    peered = held.peers is not None and bool(held.peers.peers)
    for name in back & held.backends.keys():
        backends[name] = _backend_text(held.backends[name], peered, timed, opts).encode()
    for name in stubbed:
        backends[name] = stub_backend(held.backends[name]).encode()
    return frozenset(stubbed)


def render_held(
    held: Held,
    opts: RenderOptions,
    previous: Rendered | None = None,
    change: ChangeSet | None = None,
    set_aside: frozenset[str] = frozenset(),
    backends_aside: frozenset[str] = frozenset(),
    rules_aside: frozenset[str] = frozenset(),
) -> Rendered:
    """Render `held`, reusing every section of `previous` whose input did not change.
    The certificates `set_aside` are left out of the crt-lists (the applier's choice:
    certificates the agent or HAProxy refused); the backends `backends_aside` are rendered
    as stubs (`stub_backend`: backends HAProxy refused), and the route rules whose
    fingerprint is in `rules_aside` are not rendered (rules HAProxy refused).

    `change`, when its base is the snapshot `previous` was rendered from, names every
    backend that differs: only those are rendered and the previous sections are copied
    as dicts (C speed), O(changed backends). Otherwise each backend's bytes are compared
    with `previous`'s (a Python loop over all names). The peers and frontends sections are
    reused when their serialized part is unchanged (8,000 host routes are not validated
    again per endpoint change). Byte for byte what `render_held(held, opts)` gives."""
    if previous is not None and previous.options != opts:
        previous = None  # every section depends on the options
    header = _text(
        [
            "# Generated by the peerplane node agent; do not edit.",
            f"# workload {check(_WORKLOAD, held.workload, 'workload')}"
            f" content {check(_HASH, held.content_hash, 'hash')}",
            "",
        ]
    )
    frontends: Frontends | None
    if previous is not None:
        global_section = previous.global_section
        peers = _reusable(previous.peers_section, held.peers_part)
        moved = None  # whether a route group changed, when `change` says so
        if change is not None and change.base == previous.content_hash:
            moved = bool(change.route_groups or change.removed_route_groups)
        frontends = _reusable_frontends(previous.routed, held, set_aside, rules_aside, moved)
    else:
        global_section, peers, frontends = _section(b"", _global(opts)), None, None
    if peers is None:
        peers = _section(held.peers_part, _peers(held.peers))
    if frontends is None:
        cache = previous.routed.route_cache if previous is not None else rules.RouteCache()
        changed = None  # the route groups moved since `previous`: their layers move alone
        if previous is not None and change is not None and change.base == previous.content_hash:
            changed = change.route_groups | change.removed_route_groups
        frontends = _frontends(
            held,
            opts,
            set_aside,
            cache,
            rules_aside,
            previous.routed if previous is not None else None,
            changed,
        )
    certs.check_bound(frontends.crt_lists, held.certificates)
    peered = held.peers is not None and bool(held.peers.peers)
    if previous is not None and previous.peered != peered:
        previous = None  # every persistent backend's stick table names the peers or not
    reused = previous is not None and frontends is previous.routed
    timed = previous.timed if reused and previous is not None else sets_timeouts(frontends)
    if previous is not None and previous.timed != timed:
        previous = None  # every HTTP backend applies a rule's timeouts or not
    found = None
    if previous is not None and change is not None and change.base == previous.content_hash:
        found = _changed_backends(held, opts, previous, change, backends_aside)
    backends, sections = (
        found
        if found is not None
        else _compared_backends(held, opts, previous, backends_aside, timed)
    )
    stubbed = _set_aside_backends(held, opts, backends, previous, backends_aside, timed)
    _check_routed(frontends.routed, held, sections)
    return Rendered(
        header=header,
        global_section=global_section,
        peers_section=peers,
        routed=frontends,
        peered=peered,
        timed=timed,
        names=held.names,
        keys=held.framed,
        encoded=backends,
        content_hash=held.content_hash,
        options=opts,
        stubbed=stubbed,
        sections=sections,
    )


def _check_routed(routed: frozenset[str], held: Held, sections: Mapping[str, str]) -> None:
    """Every section a route names exists: a backend's own, or a spare one claimed (a
    backend that runs in a spare is named by its section, never its name)."""
    for name in sorted(routed):
        backend = held.backends.get(name)
        if backend is None and name not in sections:
            raise RenderError(f"route to unknown backend {name!r}")
        if backend is not None and backend.section:
            raise RenderError(f"route to backend {name!r}, which runs in a spare section")


_Backends = dict[str, bytes]  # backend name -> its section as UTF-8
_Sections = dict[str, str]  # claimed spare section -> backend name


def _claim(sections: _Sections, name: str, backend: pb.Backend) -> None:
    """Record the spare section `backend` runs in; two backends in one is refused."""
    if backend.section and sections.setdefault(backend.section, name) != name:
        raise RenderError(f"backend {name}: spare section claimed twice")


def _changed_backends(
    held: Held, opts: RenderOptions, previous: Rendered, change: ChangeSet, aside: frozenset[str]
) -> tuple[_Backends, _Sections] | None:
    """The sections of `previous` copied, those removed dropped and those changed or added
    rendered; None when the result does not hold exactly `held`'s backends (a change set
    that does not fit: the caller compares instead)."""
    encoded = dict(previous.encoded)
    sections = dict(previous.sections)
    owners = {owner: section for section, owner in sections.items()} if sections else {}
    for name in (*change.removed, *change.backends):
        encoded.pop(name, None)
        if name in owners:
            del sections[owners[name]]
    backends = held.backends
    for name in change.backends:
        if name not in backends:
            return None
        if name in aside:
            encoded[name] = b""  # a stub (`_set_aside_backends`)
        else:
            encoded[name] = _backend_text(
                backends[name], previous.peered, previous.timed, opts
            ).encode()
        _claim(sections, name, backends[name])
    if len(encoded) != len(held.names):
        return None
    _check_sections(sections, backends)
    return encoded, sections


def _check_sections(sections: _Sections, backends: Mapping[str, pb.Backend]) -> None:
    """No claimed spare section is also a backend's own name (two sections of one name)."""
    for section in [s for s in sections if s in backends]:
        raise RenderError(f"spare section {section} is also a backend of the snapshot")


def _compared_backends(
    held: Held, opts: RenderOptions, previous: Rendered | None, aside: frozenset[str], timed: bool
) -> tuple[_Backends, _Sections]:
    """Each backend's section reused when its bytes are those `previous` rendered, else
    rendered: one Python iteration per backend."""
    old_keys = previous.keys if previous is not None else {}
    old_encoded = previous.encoded if previous is not None else {}
    peered = held.peers is not None and bool(held.peers.peers)
    encoded: dict[str, bytes] = {}
    sections: _Sections = {}
    framed = held.framed
    for name in held.names:
        data = framed[name]
        before = old_keys.get(name)
        backend = held.backends[name]
        if before is data or (before is not None and before == data):
            encoded[name] = old_encoded[name]
        elif name in aside:
            encoded[name] = b""  # a stub (`_set_aside_backends`)
        else:
            encoded[name] = _backend_text(backend, peered, timed, opts).encode()
        _claim(sections, name, backend)
    _check_sections(sections, held.backends)
    return encoded, sections


def render(snapshot: pb.Snapshot, opts: RenderOptions) -> str:
    """The whole haproxy.cfg for one instance."""
    try:
        held = Held.from_snapshot(snapshot)
    except DeltaError as e:
        raise RenderError(str(e)) from None
    return render_held(held, opts).text()
