"""The protocol HAProxy speaks to a backend's servers, from its Service port and routes.

A Service port's `appProtocol` says what its pods speak (Kubernetes' standard values,
KEP-3726): `kubernetes.io/h2c` is cleartext HTTP/2 (HAProxy `proto h2`),
`kubernetes.io/ws` WebSocket over HTTP/1.1 (HAProxy passes the upgrade as it does for
any HTTP/1.1 backend) and `kubernetes.io/wss` WebSocket over TLS (the servers are spoken
to over TLS, not verified: `ssl verify none`, as nothing says which CA signs a pod's
certificate; docs/annotations.md, "Backend protocol"). A backend a GRPCRoute reaches
speaks HTTP/2 whatever its appProtocol (gRPC is HTTP/2). Any other value, or none, keeps
HTTP/1.1; a backend in mode tcp has no protocol.
"""

from __future__ import annotations

from controlplane.model import ServicePort

HTTP1 = ""
H2C = "h2"
WS = "ws"
WSS = "wss"
PROTOCOLS = (HTTP1, H2C, WS, WSS)
"""Every value of `BackendSpec.protocol` (the agent refuses another)."""

APP_PROTOCOLS = {
    "kubernetes.io/h2c": H2C,
    "kubernetes.io/ws": WS,
    "kubernetes.io/wss": WSS,
}
"""appProtocol values read; any other keeps HTTP/1.1."""


def backend_protocol(port: ServicePort, mode: str, grpc: bool) -> str:
    """The protocol of the backend of `port` in `mode`; `grpc`: a GRPCRoute reaches it."""
    if mode != "http":
        return HTTP1
    if grpc:
        return H2C
    return APP_PROTOCOLS.get(port.app_protocol, HTTP1)
