"""Which route kinds a Gateway listener's protocol carries, which TLS and TCP listeners
can be served, and which listeners of one Gateway conflict on a port.

HTTP (and HTTPS) listeners carry HTTPRoutes and GRPCRoutes, TLS listeners with
`tls.mode: Passthrough` TLSRoutes (routed by SNI, not terminated), TCP listeners
TCPRoutes. One port carries one
family: HTTP(S), TLS or TCP; two listeners of one Gateway on a port in different families,
or two TCP listeners on a port, are conflicted (Gateway API: Conflicted, ProtocolConflict)
and neither is served.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.model import GatewayListener
from controlplane.routes import names

GroupKind = tuple[str, str]  # (group, kind)

L4_PROTOCOLS = ("TLS", "TCP")
HTTP_PROTOCOLS = ("HTTP", "HTTPS")
_KINDS: dict[str, tuple[GroupKind, ...]] = {
    "HTTP": (names.HTTPROUTE_KIND, names.GRPCROUTE_KIND),
    "HTTPS": (names.HTTPROUTE_KIND, names.GRPCROUTE_KIND),
    "TLS": (names.TLSROUTE_KIND,),
    "TCP": (names.TCPROUTE_KIND,),
}


def protocol_kinds(listener: GatewayListener) -> tuple[GroupKind, ...]:
    """The route kinds the listener's protocol carries."""
    return _KINDS.get(listener.protocol, ())


def route_kinds(listener: GatewayListener) -> tuple[GroupKind, ...]:
    """The route kinds the listener carries: its protocol's, narrowed to allowedRoutes.kinds
    when given."""
    kinds = protocol_kinds(listener)
    if not listener.allowed_kinds:
        return kinds
    wanted = {(k.group, k.kind) for k in listener.allowed_kinds}
    return tuple(kind for kind in kinds if kind in wanted)


def l4_problem(listener: GatewayListener) -> tuple[str, str] | None:
    """Why a TLS or TCP listener cannot be served (Accepted reason and message); None when
    it can, or when it is not a TLS or TCP listener."""
    if listener.protocol == "TLS" and listener.tls_mode != "Passthrough":
        mode = listener.tls_mode or "no tls block"
        return (
            names.UNSUPPORTED_PROTOCOL,
            f"protocol TLS is served with tls.mode Passthrough only, not {mode} "
            "(terminate with an HTTPS listener)",
        )
    return None


def _family(protocol: str) -> str:
    return "HTTP" if protocol in HTTP_PROTOCOLS else protocol


def conflicts(listeners: Sequence[GatewayListener]) -> dict[str, str]:
    """Listener name -> why it conflicts with another listener of the same Gateway on its
    port: HTTP(S), TLS and TCP families mixed on a port, or two TCP listeners on one."""
    by_port: dict[int, list[GatewayListener]] = {}
    for listener in listeners:
        by_port.setdefault(listener.port, []).append(listener)
    found: dict[str, str] = {}
    for port, sharing in by_port.items():
        families = sorted({_family(listener.protocol) for listener in sharing})
        tcp = [listener for listener in sharing if listener.protocol == "TCP"]
        if len(families) > 1:
            message = f"port {port} carries {' and '.join(families)} listeners: not served"
        elif len(tcp) > 1:
            message = f"port {port} carries {len(tcp)} TCP listeners: not served"
        else:
            continue
        for listener in sharing:
            if len(families) > 1 or listener.protocol == "TCP":
                found[listener.name] = message
    return found
