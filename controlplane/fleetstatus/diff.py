"""What changed between two versions of a workload's snapshot, readable: peers, each
backend (added, removed, its settings, each slot), frontends, route listeners (with their
TLS certificates and PROXY protocol), certificates (fingerprint, serial, notAfter: never
the PEM), TLS passthrough listeners and warnings. Pure: two `Snapshot` messages in, lines
out."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter
from typing import TypeVar

from google.protobuf import text_format
from google.protobuf.message import Message

from peerplane.runtime.untrusted import escape
from peerplane.v1 import peerplane_pb2 as pb

MAX_VALUE_CHARS = 120


K = TypeVar("K", int, str)
M = TypeVar("M")

_NAME = attrgetter("name")
_PORT = attrgetter("port")
_INDEX = attrgetter("index")


def _pairs(
    old: Iterable[M], new: Iterable[M], key: Callable[[M], K]
) -> Iterator[tuple[K, M | None, M | None]]:
    """Each key of either side in order, with its item on each side (None: absent)."""
    before = {key(item): item for item in old}
    after = {key(item): item for item in new}
    for found in sorted(before.keys() | after.keys()):
        yield found, before.get(found), after.get(found)


def _short(message: object) -> str:
    if isinstance(message, Message):
        text = text_format.MessageToString(message, as_one_line=True)
    else:
        text = str(message)
    text = escape(text)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 3] + "..."


def _slot(slot: pb.Slot | None) -> str:
    if slot is None:
        return "(none)"
    if not slot.enabled:
        return "(free)"
    return f"{escape(slot.address)}:{slot.port}"


def _fields(old: Message, new: Message, skip: Iterable[str] = ()) -> list[str]:
    """ "name: old -> new" for each field (but `skip`) whose value differs."""
    lines = []
    skipped = set(skip)
    for desc in type(new).DESCRIPTOR.fields:
        if desc.name in skipped:
            continue
        before, after = getattr(old, desc.name), getattr(new, desc.name)
        if before == after:
            continue
        if not isinstance(before, str | bytes | int | float | Message):  # repeated
            shown_before = f"[{len(before)}]" if before else "[]"
            shown_after = ", ".join(_short(v) for v in after) if after else "[]"
            lines.append(f"{desc.name}: {shown_before} -> {shown_after}")
        else:
            lines.append(f"{desc.name}: {_short(before)} -> {_short(after)}")
    return lines


def _peers(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    before = {p.name: f"{p.address}:{p.port}" for p in old.peers.peers}
    after = {p.name: f"{p.address}:{p.port}" for p in new.peers.peers}
    lines = [f"  + {escape(n)} {escape(after[n])}" for n in sorted(after.keys() - before.keys())]
    lines += [f"  - {escape(n)} {escape(before[n])}" for n in sorted(before.keys() - after.keys())]
    lines += [
        f"  ~ {escape(n)} {escape(before[n])} -> {escape(after[n])}"
        for n in sorted(before.keys() & after.keys())
        if before[n] != after[n]
    ]
    lines += [f"  {line}" for line in _fields(old.peers, new.peers, skip=("peers",))]
    return ["peers:", *lines] if lines else []


def _backend(old: pb.Backend, new: pb.Backend) -> list[str]:
    lines = [f"  {line}" for line in _fields(old, new, skip=("slots", "warnings"))]
    for index, a, b in _pairs(old.slots, new.slots, _INDEX):
        if a != b:
            name = b.server_name if b is not None else a.server_name if a is not None else ""
            lines.append(f"  slot {index} ({escape(name)}): {_slot(a)} -> {_slot(b)}")
    if len(old.warnings) != len(new.warnings) or list(old.warnings) != list(new.warnings):
        lines.append(f"  warnings: {len(old.warnings)} -> {len(new.warnings)}")
    return lines


def diff(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    """The changes from `old` to `new`, one line each (indented under their part)."""
    lines = [
        f"{escape(new.workload)}: v{old.version} ({old.content_hash[:12]}) -> "
        f"v{new.version} ({new.content_hash[:12]})"
    ]
    if old.content_hash == new.content_hash:
        return [*lines, "same content"]
    lines += _peers(old, new)
    for name, a, b in _pairs(old.backends, new.backends, _NAME):
        if a is None and b is not None:
            used = sum(s.enabled for s in b.slots)
            lines.append(f"backend {escape(name)}: added ({used}/{len(b.slots)} slots used)")
        elif b is None and a is not None:
            lines.append(f"backend {escape(name)}: removed")
        elif a is not None and b is not None and a != b:
            lines += [f"backend {escape(name)}:", *_backend(a, b)]
    front = _fields(old, new, skip=_NOT_FRONTENDS)
    if front:
        lines += ["frontends:", *(f"  {line}" for line in front)]
    groups_differ = list(old.route_groups) != list(new.route_groups)
    if list(old.http_listeners) != list(new.http_listeners) or groups_differ:
        rules = (
            sum(len(x.rules) for x in s.http_listeners) + sum(len(g.rules) for g in s.route_groups)
            for s in (old, new)
        )
        lines.append("http listeners: {} -> {} rules".format(*rules))
        lines += _route_groups(old, new)
        lines += _listener_tls(old, new)
    lines += _certificates(old, new)
    lines += _tls_listeners(old, new)
    if list(old.warnings) != list(new.warnings):
        lines.append(f"warnings: {len(old.warnings)} -> {len(new.warnings)}")
        lines += [
            f"  + {escape(w.object)} {escape(w.key)}: {escape(w.reason)}"
            for w in new.warnings
            if w not in old.warnings
        ]
    if len(lines) == 1:
        lines.append("no change shown (only fields this view leaves out)")
    return lines


_NOT_FRONTENDS = (
    "workload",
    "version",
    "content_hash",
    "peers",
    "backends",
    "warnings",
    "http_listeners",
    "certificates",
    "tls_listeners",
    "route_groups",
)
MAX_GROUP_LINES = 20  # route groups named per diff; the rest counted
FINGERPRINT_CHARS = 16  # of the SHA-256 hex: enough to tell two certificates apart


def _group_key(group: pb.RouteGroup) -> str:
    return f"{group.listener}/{group.host}"


def _route_groups(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    """The route groups (a listener's rules of one host) added, removed or changed, by
    key, the first `MAX_GROUP_LINES`."""
    found = []
    for key, a, b in _pairs(old.route_groups, new.route_groups, _group_key):
        if a != b:
            what = "added" if a is None else "removed" if b is None else "changed"
            rules = len((b if b is not None else a).rules)  # type: ignore[union-attr]
            found.append(f"  route group {escape(key)}: {what} ({rules} rules)")
    more = len(found) - MAX_GROUP_LINES
    return found[:MAX_GROUP_LINES] + ([f"  ... and {more} more route groups"] if more > 0 else [])


def _fingerprint(certificate: pb.Certificate) -> str:
    return escape(certificate.fingerprint[:FINGERPRINT_CHARS]) or "(none)"


def _certificate(certificate: pb.Certificate) -> str:
    """What a certificate is, without its PEM: Secret, fingerprint, serial, names."""
    names = ", ".join(escape(n) for n in certificate.dns_names) or "no DNS names"
    return (
        f"Secret {escape(certificate.secret)}, fingerprint {_fingerprint(certificate)}, "
        f"serial {escape(certificate.serial)}, not after {escape(certificate.not_after)}, "
        f"{names}"
    )


def _certificates(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    """Added, removed and renewed certificates (a renewal: its fingerprint changed)."""
    lines = []
    for name, a, b in _pairs(old.certificates, new.certificates, _NAME):
        if a is None and b is not None:
            lines.append(f"  + {escape(name)}: {_certificate(b)}")
        elif b is None and a is not None:
            lines.append(f"  - {escape(name)}: fingerprint {_fingerprint(a)}")
        elif a is not None and b is not None and _shown(a) != _shown(b):
            changes = [
                f"fingerprint {_fingerprint(a)} -> {_fingerprint(b)}",
                f"serial {escape(a.serial)} -> {escape(b.serial)}",
            ]
            if a.not_after != b.not_after:
                changes.append(f"not after {escape(a.not_after)} -> {escape(b.not_after)}")
            if list(a.dns_names) != list(b.dns_names):
                names = (" ".join(escape(n) for n in c.dns_names) or "none" for c in (a, b))
                changes.append("names {} -> {}".format(*names))
            if a.secret != b.secret:
                changes.append(f"Secret {escape(a.secret)} -> {escape(b.secret)}")
            lines.append(f"  ~ {escape(name)}: " + ", ".join(changes))
    return ["certificates:", *lines] if lines else []


def _shown(certificate: pb.Certificate) -> tuple[object, ...]:
    """A certificate's fields but its PEM (inspection answers clear it anyway)."""
    c = certificate
    return (c.secret, c.fingerprint, c.serial, c.not_after, tuple(c.dns_names))


def _bindings(listener: pb.HttpListener | None) -> str:
    if listener is None or not listener.HasField("tls"):
        return "plain"
    shown = []
    for binding in listener.tls.certificates:
        names = " ".join(escape(n) for n in binding.hostnames) or "its own names"
        shown.append(f"{escape(binding.certificate)} ({names})")
    strict = "strict-sni, " if listener.tls.strict_sni else ""
    return f"tls {strict}" + ", ".join(shown)


def _listener_tls(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    """Per HTTP port: its certificates (the first the default) and PROXY protocol, when
    they changed."""
    lines = []
    for port, a, b in _pairs(old.http_listeners, new.http_listeners, _PORT):
        changes = []
        if _bindings(a) != _bindings(b):
            changes.append(f"{_bindings(a)} -> {_bindings(b)}")
        proxy = tuple(x is not None and x.accept_proxy for x in (a, b))
        if proxy[0] != proxy[1]:
            changes.append("accept-proxy {} -> {}".format(*("on" if p else "off" for p in proxy)))
        if changes:
            lines.append(f"  port {port}: " + "; ".join(changes))
    return lines


def _passthrough(listener: pb.TlsPassthroughListener) -> str:
    routes = "; ".join(
        "{} -> {}".format(
            " ".join(escape(n) for n in route.hostnames) or "any SNI",
            " ".join(f"{escape(b.backend) or '(unresolved)'}*{b.weight}" for b in route.backends)
            or "(none)",
        )
        for route in listener.routes
    )
    proxy = ", accept-proxy" if listener.accept_proxy else ""
    return _short(f"{routes or 'no routes'}{proxy}")


def _tls_listeners(old: pb.Snapshot, new: pb.Snapshot) -> list[str]:
    lines = []
    for port, a, b in _pairs(old.tls_listeners, new.tls_listeners, _PORT):
        if a is None and b is not None:
            lines.append(f"  + {port}: {_passthrough(b)}")
        elif b is None and a is not None:
            lines.append(f"  - {port}")
        elif a is not None and b is not None and a != b:
            lines.append(f"  ~ {port}: {_passthrough(a)} -> {_passthrough(b)}")
    return ["tls passthrough listeners:", *lines] if lines else []
