"""TLS termination of the route model's HTTP listeners -> crt-lists, bind options, and the
runtime API commands that move HAProxy from one set of certificates to the next.

Pure. Each HTTPS listener K (`listeners.listener_key`: its port, or `<address>_<port>`)
reads `<certs dir>/fe_K.crtlist`, one line per binding in
the snapshot's order (the first is the default certificate: the one a client gets whose
SNI matches no line, or who sends none), each line `<certs dir>/<name>.pem [sni...]`. A
listener with `strict_sni` has no default: its bind line says `strict-sni`, and a client
whose SNI matches no line fails the handshake (2.6, 3.0 and 3.2 alike).
A renewed certificate, a binding added or removed, are runtime API commands (`set ssl
cert` + `commit ssl cert`, `new ssl cert`, `add ssl crt-list`, `del ssl crt-list`, `del
ssl cert`, the same on 2.6, 3.0 and 3.2); a changed default certificate reloads, as a new
HTTPS port does (its bind line is new config text).

Every name and filter is re-checked against `peerplane.patterns` before it is written: those
patterns admit no space, quote, backslash or `#`, so nothing needs quoting in a bind line,
a crt-list or a runtime command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nodeagent.config.checked import DIRECTORY, check
from nodeagent.config.errors import RenderError
from nodeagent.config.listeners import listener_key
from nodeagent.haproxy.commands import CertUpdate
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb

# HTTP/2 and HTTP/1.1 offered by ALPN: mode http frontends speak both on 2.6, 3.0 and 3.2.
ALPN = "h2,http/1.1"


@dataclass(frozen=True)
class CrtLine:
    """One crt-list line: a certificate and its SNI filters (none: the certificate's own
    names)."""

    name: str
    filters: tuple[str, ...] = ()


CrtLists = Mapping[str, tuple[CrtLine, ...]]  # listener key -> its crt-list's lines, in order


def cert_path(certs_dir: str, name: str) -> str:
    return f"{certs_dir}/{name}.pem"


def crtlist_path(certs_dir: str, key: str) -> str:
    """The crt-list of the listener `key` (`listeners.listener_key`)."""
    return f"{certs_dir}/fe_{key}.crtlist"


def crtlist_line(certs_dir: str, line: CrtLine) -> str:
    return " ".join([cert_path(certs_dir, line.name), *line.filters])


def crtlist_file(certs_dir: str, lines: Sequence[CrtLine]) -> bytes:
    """A crt-list's bytes, `certs_dir` naming where its certificates are."""
    return "".join(crtlist_line(certs_dir, line) + "\n" for line in lines).encode()


def check_certs_dir(certs_dir: str) -> str:
    return check(DIRECTORY, certs_dir, "certificates directory")


def check_name(name: str) -> str:
    if not patterns.is_certificate_name(name):
        raise RenderError(f"invalid certificate name: {name[:80]!r}")
    return name


def crt_lists(
    listeners: Sequence[pb.HttpListener], set_aside: frozenset[str] = frozenset()
) -> dict[str, tuple[CrtLine, ...]]:
    """The crt-list of every listener with TLS, by listener key, every string checked. The lines
    of the certificates `set_aside` (refused by the agent or by HAProxy) are left out: a
    listener whose every line is set aside has an empty crt-list (`bind_tls`)."""
    out: dict[str, tuple[CrtLine, ...]] = {}
    for listener in listeners:
        if not listener.HasField("tls"):
            continue
        port = listener.port
        lines: list[CrtLine] = []
        for binding in listener.tls.certificates:
            name = check_name(binding.certificate)
            for host in binding.hostnames:  # "!name": not for this name (a catch-all line)
                if not patterns.is_route_host(host.removeprefix("!")):
                    raise RenderError(f"certificate {name} on port {port}: invalid SNI {host!r}")
            lines.append(CrtLine(name, tuple(binding.hostnames)))
        if not lines:
            raise RenderError(f"HTTPS listener {port} has no certificate")
        # A certificate may be bound twice (other host filters).
        out[listener_key(listener)] = tuple(line for line in lines if line.name not in set_aside)
    return out


def strict_sni_ports(listeners: Sequence[pb.HttpListener]) -> frozenset[str]:
    """The HTTPS listeners (by listener key) without a default certificate."""
    return frozenset(
        listener_key(listener)
        for listener in listeners
        if listener.HasField("tls") and listener.tls.strict_sni
    )


def bind_tls(certs_dir: str, key: str, lists: CrtLists, strict_sni: bool = False) -> str:
    """The bind line's TLS options of a listener (by key; "" for plain HTTP); `strict_sni`:
    no default certificate. A listener whose certificates are all set aside keeps its port
    with `strict-sni` too: HAProxy (2.6, 3.0, 3.2) takes an empty crt-list only with it,
    and its handshakes then fail."""
    if key not in lists:
        return ""
    path = crtlist_path(check_certs_dir(certs_dir), key)
    strict = strict_sni or not lists[key]
    return f" ssl crt-list {path} alpn {ALPN}" + (" strict-sni" if strict else "")


def check_bound(lists: CrtLists, certificates: Mapping[str, pb.Certificate]) -> None:
    """Every certificate a crt-list names is in the snapshot, and every certificate's
    name is one the agent may write as a file name."""
    for name in certificates:
        check_name(name)
    for port, lines in sorted(lists.items()):
        for line in lines:
            if line.name not in certificates:
                raise RenderError(f"HTTPS listener {port}: unknown certificate {line.name}")


def bound(lists: CrtLists) -> frozenset[str]:
    """The certificates HAProxy loads: those some crt-list names."""
    return frozenset(line.name for lines in lists.values() for line in lines)


def cert_updates(
    certs_dir: str,
    old_lists: CrtLists,
    new_lists: CrtLists,
    new_certs: Mapping[str, pb.Certificate],
    changed: frozenset[str],
) -> tuple[CertUpdate, ...] | str:
    """The runtime steps from the old crt-lists and certificates to the new ones, in the
    order they must run; a reason to reload instead when a crt-list's default (first) line
    changes, or when a port gains or loses TLS (its bind line changes: the frontends'
    text says so first). `changed`: the certificates whose bytes differ."""
    if old_lists.keys() != new_lists.keys():
        return "HTTPS listener ports changed"
    was, now = bound(old_lists), bound(new_lists)

    def update(op: str, name: str, **kw: str) -> CertUpdate:
        cert = new_certs.get(name)
        fingerprint = cert.fingerprint if cert is not None else ""
        pem = cert.pem if cert is not None and op in ("load", "set") else b""
        return CertUpdate(
            op, name, cert_path(certs_dir, name), fingerprint=fingerprint, pem=pem, **kw
        )

    out = [update("load", n) for n in sorted(now - was)]
    out += [update("set", n) for n in sorted((changed & was) & now)]
    dels: list[CertUpdate] = []
    adds: list[CertUpdate] = []
    for port in sorted(new_lists):
        before, after = old_lists[port], new_lists[port]
        if before == after:
            continue
        if not before or not after or before[0] != after[0]:
            return f"HTTPS listener {port}: default certificate changed (first crt-list line)"
        twice = _bound_twice(before) | _bound_twice(after)
        if twice:  # `del ssl crt-list` would have to name the line: not worth it
            return f"HTTPS listener {port}: certificate {min(twice)} bound on two lines changed"
        crtlist = crtlist_path(certs_dir, port)
        kept = set(before) & set(after)
        removed = [line for line in before if line not in kept]
        added = [line for line in after if line not in kept]
        dels += [update("del", line.name, crtlist=crtlist) for line in removed]
        adds += [
            update("add", line.name, crtlist=crtlist, line=crtlist_line(certs_dir, line))
            for line in added
        ]
    out += dels + adds
    out += [update("unload", n) for n in sorted(was - now)]
    return tuple(out)


def _bound_twice(lines: Sequence[CrtLine]) -> set[str]:
    names = [line.name for line in lines]
    return {name for name in names if names.count(name) > 1}


_SAID = {"set": "renewed", "load": "bound", "unload": "unbound"}


def describe(steps: Sequence[CertUpdate], most: int = 4) -> str:
    """What the steps do, by certificate name (names only: never a certificate's bytes),
    e.g. "certificates (renewed default_web-tls; bound default_api-tls)"."""
    said: dict[str, list[str]] = {}
    for step in steps:
        word = _SAID.get(step.op)
        if word is not None:
            said.setdefault(word, []).append(step.name)
    lines = sum(1 for step in steps if step.op in ("add", "del"))
    parts = [
        f"{word} {', '.join(names[:most])}"
        + (f" +{len(names) - most}" if len(names) > most else "")
        for word, names in said.items()
    ]
    if lines and not said:
        parts.append(f"{lines} crt-list line(s)")
    return f"certificates ({'; '.join(parts)})"
