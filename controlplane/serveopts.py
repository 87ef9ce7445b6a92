"""`controlplane serve` flags for transport security, authentication, limits, metrics and
logs, and what they build (ServerOptions, the Authenticator)."""

from __future__ import annotations

import argparse
from pathlib import Path

from controlplane.logformat import LOG_FORMATS
from controlplane.server import ServerOptions, StreamLimits, TlsFiles
from controlplane.server.auth import DEFAULT_AUDIENCE, Authenticator, KubeTokenReviewer

DEFAULT_MAX_STREAMS_PER_PEER = 8
DEFAULT_METRICS_ADDRESS = "127.0.0.1"
NO_TRANSPORT = (
    "the gRPC port needs TLS: pass --tls-cert FILE --tls-key FILE (and --client-ca FILE to "
    "require client certificates), or --insecure to serve plaintext (development only)"
)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {text!r}")
    return int(text)


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port (0 picks one), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServerOptions()
    tls = parser.add_argument_group(
        "transport security (one of --tls-cert/--tls-key or --insecure)"
    )
    tls.add_argument("--tls-cert", type=Path, help="PEM certificate chain of the gRPC port")
    tls.add_argument("--tls-key", type=Path, help="PEM private key of --tls-cert")
    tls.add_argument(
        "--client-ca",
        type=Path,
        help="PEM CA bundle: clients must present a certificate it signed (mTLS)",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="serve plaintext gRPC (development, loopback); logged as a warning",
    )
    auth = parser.add_argument_group("authentication (TokenReview through the Kubernetes API)")
    auth.add_argument(
        "--authenticate-agents",
        action="store_true",
        help="agents must send 'authorization: Bearer <projected ServiceAccount token>' "
        "bound to the pod their Hello names",
    )
    auth.add_argument(
        "--authenticate-inspection",
        action="store_true",
        help="ListWorkloads, GetSnapshot and ListAgents need a valid token (not an agent's); "
        "on by default with --authenticate-agents",
    )
    auth.add_argument(
        "--open-inspection",
        action="store_true",
        help="with --authenticate-agents: leave the inspection RPCs open to any caller "
        "(every workload's snapshot and every agent); logged as a warning",
    )
    auth.add_argument(
        "--token-audience",
        default=DEFAULT_AUDIENCE,
        help=f"audience tokens must carry (default {DEFAULT_AUDIENCE})",
    )
    auth.add_argument(
        "--token-cache-ttl",
        type=_positive_float,
        default=60.0,
        help="seconds a verified token is trusted without a new TokenReview (default 60)",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-receive-message-bytes",
        type=_positive_int,
        default=defaults.max_receive_message_bytes,
        help="largest message accepted from a client "
        f"(default {defaults.max_receive_message_bytes})",
    )
    limits.add_argument(
        "--max-send-message-bytes",
        type=_positive_int,
        default=defaults.max_send_message_bytes,
        help=f"largest message sent, i.e. snapshot (default {defaults.max_send_message_bytes})",
    )
    limits.add_argument(
        "--max-streams-per-peer",
        type=_non_negative_int,
        default=DEFAULT_MAX_STREAMS_PER_PEER,
        help="concurrent agent streams from one peer address; more get RESOURCE_EXHAUSTED "
        f"(default {DEFAULT_MAX_STREAMS_PER_PEER}; 0 = unlimited)",
    )
    limits.add_argument(
        "--keepalive-time",
        type=_positive_float,
        default=defaults.keepalive_time_s,
        help=f"seconds between server pings on idle connections (default "
        f"{defaults.keepalive_time_s:g})",
    )
    limits.add_argument(
        "--keepalive-timeout",
        type=_positive_float,
        default=defaults.keepalive_timeout_s,
        help=f"seconds to wait for a ping answer before dropping the connection (default "
        f"{defaults.keepalive_timeout_s:g})",
    )
    limits.add_argument(
        "--max-connection-age",
        type=_positive_float,
        default=defaults.max_connection_age_s,
        help=f"seconds before a connection is asked to reconnect, so agents rebalance "
        f"(default {defaults.max_connection_age_s:g})",
    )
    obs = parser.add_argument_group("observability")
    obs.add_argument(
        "--metrics-port",
        type=_port,
        help="serve /metrics, /healthz and /readyz over HTTP on this port (0 picks one; "
        "default: off)",
    )
    obs.add_argument(
        "--metrics-address",
        default=DEFAULT_METRICS_ADDRESS,
        help=f"bind address of --metrics-port (default {DEFAULT_METRICS_ADDRESS}; "
        "0.0.0.0 in a cluster)",
    )
    obs.add_argument(
        "--log-format", choices=LOG_FORMATS, default="text", help="text (default) or json"
    )


def check(args: argparse.Namespace) -> str | None:
    """The reason the flags cannot work together, or None."""
    has_cert, has_key = args.tls_cert is not None, args.tls_key is not None
    if has_cert != has_key:
        return "--tls-cert and --tls-key go together"
    if args.client_ca is not None and not has_cert:
        return "--client-ca needs --tls-cert and --tls-key"
    if args.insecure and has_cert:
        return "--insecure contradicts --tls-cert: choose one"
    if not args.insecure and not has_cert:
        return NO_TRANSPORT
    if args.open_inspection and args.authenticate_inspection:
        return "--open-inspection contradicts --authenticate-inspection: choose one"
    if args.open_inspection and not args.authenticate_agents:
        return "--open-inspection only applies with --authenticate-agents"
    return None


def inspection_authenticated(args: argparse.Namespace) -> bool:
    """Inspection follows agent authentication unless explicitly opened: a cluster that
    checks agents' tokens must not hand every snapshot to an anonymous caller."""
    if args.authenticate_inspection:
        return True
    return bool(args.authenticate_agents) and not args.open_inspection


def auth_warning(args: argparse.Namespace) -> str | None:
    """The warning `serve` logs when inspection is open beside authenticated agents."""
    if args.open_inspection:
        return (
            "--open-inspection: ListWorkloads, GetSnapshot and ListAgents answer any caller "
            "without a token (every workload's snapshot, every agent)"
        )
    return None


def tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """The PEM files read (OSError when unreadable); None with --insecure."""
    if args.tls_cert is None:
        return None
    client_ca = Path(args.client_ca).read_bytes() if args.client_ca is not None else None
    return TlsFiles(Path(args.tls_cert).read_bytes(), Path(args.tls_key).read_bytes(), client_ca)


def server_options(args: argparse.Namespace, tls: TlsFiles | None) -> ServerOptions:
    return ServerOptions(
        keepalive_time_s=args.keepalive_time,
        keepalive_timeout_s=args.keepalive_timeout,
        max_connection_age_s=args.max_connection_age,
        max_receive_message_bytes=args.max_receive_message_bytes,
        max_send_message_bytes=args.max_send_message_bytes,
        stream=StreamLimits(max_streams_per_peer=args.max_streams_per_peer),
        tls=tls,
    )


def authenticator(args: argparse.Namespace) -> Authenticator | None:
    """A TokenReview authenticator when any authentication flag is on."""
    if not (args.authenticate_agents or inspection_authenticated(args)):
        return None
    from controlplane.source.kubernetes import load_api_client

    reviewer = KubeTokenReviewer(load_api_client(args.kubeconfig))
    return Authenticator(reviewer, args.token_audience, ttl_s=args.token_cache_ttl)
