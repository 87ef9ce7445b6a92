"""One `backend` section: balance, hash type, stick table, health checks and the server
slots, every value checked against the shared vocabulary (`peerplane.balance`,
`healthcheck`, `limits`, `names`); which keywords are written depends on the HAProxy
version (`nodeagent/haproxy/version.py`).
"""

from __future__ import annotations

from nodeagent.config.checked import check, endpoint
from nodeagent.config.errors import RenderError
from nodeagent.haproxy import version
from peerplane import balance as words
from peerplane import healthcheck, limits, names
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
            raise RenderError(f"backend {backend.name}: balance {algo} takes no argument")
        return algo
    if algo == "url_param":
        return f"url_param {check(_PARAM, arg, f'backend {backend.name}: balance url_param name')}"
    if algo == "hdr":
        return f"hdr({check(_HEADER, arg, f'backend {backend.name}: balance header name')})"
    raise RenderError(f"backend {backend.name}: invalid balance {algo!r}")


def _hash_type(value: str, backend: str) -> str:
    try:
        return words.canonical_hash_type(value)
    except ValueError:
        raise RenderError(f"backend {backend}: invalid hash-type: {value!r}") from None


def _server(backend: str, slot: pb.Slot, options: str = "") -> str:
    if names.server_index(slot.server_name) != slot.index:
        raise RenderError(f"backend {backend}: slot {slot.index} named {slot.server_name!r}")
    if slot.index > limits.MAX_SLOTS:  # the bound compute and the slot loaders hold too
        raise RenderError(f"backend {backend}: slot {slot.index} above {limits.MAX_SLOTS}")
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
        raise RenderError(f"backend {name}: invalid check interval {c.interval_ms}")
    if not healthcheck.is_count(c.rise) or not healthcheck.is_count(c.fall):
        raise RenderError(f"backend {name}: invalid check rise {c.rise} / fall {c.fall}")
    lines: list[str] = []
    if c.http_path:
        if backend.mode != "http" or not healthcheck.is_path(c.http_path):
            raise RenderError(f"backend {name}: invalid check-http {c.http_path!r}")
        lines = [f"  option httpchk GET {c.http_path}", "  http-check expect status 200-399"]
    return lines, f" check inter {c.interval_ms} rise {c.rise} fall {c.fall}"


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
    backend: pb.Backend, peers: bool = True, haproxy_version: version.Version | None = None
) -> list[str]:
    """One `backend` section; `peers` says whether the stick table is replicated,
    `haproxy_version` which version-dependent keywords may be written."""
    name = section_name(backend)
    if backend.mode not in names.MODES:
        raise RenderError(f"backend {name}: invalid mode {backend.mode!r}")
    lines = [f"backend {name}"]
    if backend.mode == "tcp":
        lines.append("  mode tcp")
    lines.append(f"  balance {_balance(backend)}")
    if backend.hash_type:
        lines.append(f"  hash-type {_hash_type(backend.hash_type, name)}")
    if backend.HasField("persistence"):
        p = backend.persistence
        if not 0 < p.expire_ms <= limits.MAX_EXPIRE_MS:
            raise RenderError(f"backend {name}: invalid expire {p.expire_ms}")
        if p.table_size > limits.MAX_TABLE_SIZE:
            raise RenderError(f"backend {name}: stick-table size above {limits.MAX_TABLE_SIZE}")
        table = f"  stick-table type ip size {haproxy_size(p.table_size)} expire {p.expire_ms}"
        if version.srvkey_addr(haproxy_version):
            table += " srvkey addr"
        if peers:
            table += f" peers {PEERS_SECTION}"
        lines += ["  stick on src", table]
    check_lines, options = _healthcheck(backend, name)
    lines += check_lines
    if backend.hash_type.startswith("consistent") and version.hash_key_addr_port(haproxy_version):
        options = " hash-key addr-port" + options
    seen: set[int] = set()
    for slot in sorted(backend.slots, key=lambda s: s.index):
        if slot.index in seen:
            raise RenderError(f"backend {name}: duplicate slot {slot.index}")
        seen.add(slot.index)
        lines.append(_server(name, slot, options))
    return lines
