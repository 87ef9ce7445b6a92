"""The control-plane gRPC server: agent streams, inspection RPCs, health, reflection."""

from controlplane.server.app import SERVICE, ControlPlaneServer, ServerOptions, TlsFiles
from controlplane.server.stream import StreamLimits

__all__ = ["SERVICE", "ControlPlaneServer", "ServerOptions", "StreamLimits", "TlsFiles"]
