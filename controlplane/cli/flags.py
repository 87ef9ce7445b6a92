"""Every flag of `controlplane compute` and `controlplane serve`: names, argparse types,
defaults, and the combinations that cannot work together.

Parsing only: nothing here opens a file, a socket or the Kubernetes API; `wiring` turns
the parsed flags into objects. `--source` is parsed once, into a `SourceSpec`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from controlplane.cli.flag_types import (
    INT32_MAX,
    MAX_BUDGET_BYTES,
    MAX_SECONDS,
    files_source,
    int_in,
    kinds,
    listen_address,
    namespaces,
    object_ref,
    port,
    positive_int,
    seconds_in,
    source_spec,
)
from controlplane.fleetstatus.command import add_arguments as add_status_arguments
from controlplane.logformat import LOG_FORMATS
from controlplane.model import ObjectRef
from controlplane.publish.store import (
    DEFAULT_DELTA_CACHE_BYTES,
    DEFAULT_RETAINED_BYTES,
    DEFAULT_RETAINED_VERSIONS,
)
from controlplane.server import ServerOptions
from controlplane.server.auth import DEFAULT_AUDIENCE
from controlplane.server.ratelimit import DEFAULT_OPENS_BURST, DEFAULT_OPENS_PER_S
from controlplane.settings.workloads import DEFAULT_MAX_WORKLOADS, DEFAULT_WORKLOAD_KINDS
from controlplane.source.convert import DEFAULT_HAPROXY_SELECTOR

DEFAULT_SETTINGS_CONFIGMAP = "haproxy-system/haproxy-settings"
DEFAULT_LISTEN = "127.0.0.1:18000"
DEFAULT_LEASE = "peerplane-controlplane"
DEFAULT_NAMESPACE = "haproxy-system"
DEFAULT_SLOTS = "peerplane-slots"
DEFAULT_LEASE_DURATION_S = 15.0
DEFAULT_TOKEN_CACHE_TTL_S = 60.0
DEFAULT_MAX_STREAMS_PER_PEER = 8
DEFAULT_METRICS_ADDRESS = "127.0.0.1"
LOG_LEVELS = ("debug", "info", "warning", "error")
NO_TRANSPORT = (
    "the gRPC port needs TLS: pass --tls-cert FILE --tls-key FILE (and --client-ca FILE to "
    "require client certificates), or --insecure to serve plaintext (development only)"
)


def build_parser() -> argparse.ArgumentParser:
    """The `controlplane` command line; `args.command` names the subcommand."""
    parser = argparse.ArgumentParser(
        prog="controlplane",
        description="Control plane for HAProxy fleets: canonical peers and server slots.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    compute_parser = commands.add_parser(
        "compute", help="print the snapshots computed for a folder of manifests as JSON"
    )
    compute_parser.add_argument(
        "--source", type=files_source, required=True, help="files:DIR, a manifest folder"
    )
    compute_parser.add_argument(
        "--workload", help="print only this workload's snapshot (namespace/Kind/name)"
    )
    add_source_arguments(compute_parser)
    serve_parser = commands.add_parser("serve", help="run the control plane (gRPC)")
    add_serve_arguments(serve_parser)
    status_parser = commands.add_parser(
        "status", help="every agent's sync state and persistence health, worst first"
    )
    add_status_arguments(status_parser)
    return parser


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that mean the same for `compute` and `serve`."""
    parser.add_argument(
        "--configmap",
        type=object_ref,
        default=ObjectRef.parse(DEFAULT_SETTINGS_CONFIGMAP),
        help=f"settings ConfigMap NAMESPACE/NAME (default {DEFAULT_SETTINGS_CONFIGMAP})",
    )
    parser.add_argument(
        "--haproxy-selector",
        default=DEFAULT_HAPROXY_SELECTOR,
        help=f"label selector of the HAProxy pods (default {DEFAULT_HAPROXY_SELECTOR})",
    )
    default_kinds = ",".join(sorted(DEFAULT_WORKLOAD_KINDS))
    parser.add_argument(
        "--workload-namespaces",
        type=namespaces,
        help="NS[,NS...]: only HAProxy pods in these namespaces form workloads; others are "
        "refused and reported (default: any namespace)",
    )
    parser.add_argument(
        "--workload-kinds",
        type=kinds,
        default=DEFAULT_WORKLOAD_KINDS,
        help="KIND[,KIND...]: top-owner kinds a HAProxy workload may be (a Deployment's pods "
        f"count as Deployment, a bare pod as Pod) (default {default_kinds})",
    )
    parser.add_argument(
        "--max-workloads",
        type=positive_int,
        default=DEFAULT_MAX_WORKLOADS,
        help="most HAProxy workloads served; the ones past it by namespace/Kind/name are "
        f"refused and reported (default {DEFAULT_MAX_WORKLOADS})",
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="slot ledger file (SQLite, one row per backend; a JSON file of earlier "
        "versions is migrated), read before computing and written after each change; "
        "without it (files mode) slots are kept in memory only",
    )


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `controlplane serve`."""
    parser.add_argument(
        "--source",
        type=source_spec,
        required=True,
        help="where the cluster state comes from: files:DIR (a folder of manifests) or "
        "kubernetes (the API server)",
    )
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=DEFAULT_LISTEN,
        help=f"gRPC address HOST:PORT (default {DEFAULT_LISTEN}, loopback for development; "
        "use 0.0.0.0:18000 or [::]:18000 in a cluster)",
    )
    add_source_arguments(parser)
    kube = parser.add_argument_group("kubernetes source")
    kube.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    kube.add_argument(
        "--leader-elect",
        action="store_true",
        help="every replica computes and serves; only the holder of a coordination.k8s.io "
        "Lease assigns slots and writes the slot ConfigMap (the others follow it)",
    )
    kube.add_argument("--lease-name", default=DEFAULT_LEASE, help=f"default {DEFAULT_LEASE}")
    kube.add_argument(
        "--lease-duration",
        type=seconds_in(1.0, 3600.0),
        default=DEFAULT_LEASE_DURATION_S,
        help=f"seconds a follower waits before taking an unrenewed lease (default "
        f"{DEFAULT_LEASE_DURATION_S:g}; the leader renews every duration/7.5 and gives up "
        "after 2/3 of it)",
    )
    kube.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
        help=f"default $POD_NAMESPACE, else {DEFAULT_NAMESPACE}",
    )
    kube.add_argument(
        "--slots-configmap",
        type=object_ref,
        help="the slot ledger in Kubernetes: NAMESPACE/NAME, one ConfigMap shard per backend "
        "named NAME.<namespace>.<service>.<port> and labelled peerplane.dev/slot-ledger=NAME; "
        "a single ConfigMap NAME of earlier versions is migrated (default with "
        f"--source kubernetes and no --state: LEASE_NAMESPACE/{DEFAULT_SLOTS})",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default info")
    _add_transport_arguments(parser)
    _add_auth_arguments(parser)
    _add_limit_arguments(parser)
    _add_observability_arguments(parser)


def _add_transport_arguments(parser: argparse.ArgumentParser) -> None:
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


def _add_auth_arguments(parser: argparse.ArgumentParser) -> None:
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
        type=seconds_in(0.001, 86400.0),
        default=DEFAULT_TOKEN_CACHE_TTL_S,
        help="seconds a verified token is trusted without a new TokenReview "
        f"(default {DEFAULT_TOKEN_CACHE_TTL_S:g})",
    )


def _add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ServerOptions()
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-receive-message-bytes",
        type=int_in(1024, INT32_MAX),
        default=defaults.max_receive_message_bytes,
        help="largest message accepted from a client "
        f"(default {defaults.max_receive_message_bytes})",
    )
    limits.add_argument(
        "--max-send-message-bytes",
        type=int_in(1024, INT32_MAX),
        default=defaults.max_send_message_bytes,
        help=f"largest message sent, i.e. snapshot (default {defaults.max_send_message_bytes})",
    )
    limits.add_argument(
        "--max-streams-per-peer",
        type=int_in(0, 1_000_000),
        default=DEFAULT_MAX_STREAMS_PER_PEER,
        help="concurrent agent streams from one peer address; more get RESOURCE_EXHAUSTED "
        f"(default {DEFAULT_MAX_STREAMS_PER_PEER}; 0 = unlimited)",
    )
    limits.add_argument(
        "--stream-opens-per-peer",
        type=seconds_in(0.0, 1_000_000.0),
        default=DEFAULT_OPENS_PER_S,
        metavar="RATE",
        help="streams one agent (peer address and pod) may open per second after a burst "
        f"of {DEFAULT_OPENS_BURST}, a peer address 16 times that after a burst 64 times it; "
        "faster opens get RESOURCE_EXHAUSTED with a retry hint "
        f"(default {DEFAULT_OPENS_PER_S:g}; 0 = unlimited)",
    )
    limits.add_argument(
        "--no-deltas",
        action="store_true",
        help="send every agent full snapshots only, even agents that accept deltas "
        "(benchmarks, or an escape hatch)",
    )
    limits.add_argument(
        "--retained-versions",
        type=int_in(1, 10_000),
        default=DEFAULT_RETAINED_VERSIONS,
        help="contents kept per workload as delta bases: an agent further behind gets the "
        f"full snapshot (default {DEFAULT_RETAINED_VERSIONS}; 1 = no deltas)",
    )
    limits.add_argument(
        "--retained-bytes",
        type=int_in(0, MAX_BUDGET_BYTES),
        default=DEFAULT_RETAINED_BYTES,
        help="bytes the retained delta bases of all workloads may hold beyond the current "
        "versions; the bases replaced longest ago go first, the current versions never "
        f"(default {DEFAULT_RETAINED_BYTES}; 0 = unbounded)",
    )
    limits.add_argument(
        "--delta-cache-bytes",
        type=int_in(0, MAX_BUDGET_BYTES),
        default=DEFAULT_DELTA_CACHE_BYTES,
        help="bytes of built deltas kept for the next stream at the same base, all "
        f"workloads, least recently used evicted (default {DEFAULT_DELTA_CACHE_BYTES}; "
        "0 = unbounded)",
    )
    limits.add_argument(
        "--keepalive-time",
        type=seconds_in(1.0, MAX_SECONDS),
        default=defaults.keepalive_time_s,
        help=f"seconds between server pings on idle connections (default "
        f"{defaults.keepalive_time_s:g})",
    )
    limits.add_argument(
        "--keepalive-timeout",
        type=seconds_in(1.0, MAX_SECONDS),
        default=defaults.keepalive_timeout_s,
        help=f"seconds to wait for a ping answer before dropping the connection (default "
        f"{defaults.keepalive_timeout_s:g})",
    )
    limits.add_argument(
        "--max-connection-age",
        type=seconds_in(1.0, MAX_SECONDS),
        default=defaults.max_connection_age_s,
        help=f"seconds before a connection is asked to reconnect, so agents rebalance "
        f"(default {defaults.max_connection_age_s:g})",
    )


def _add_observability_arguments(parser: argparse.ArgumentParser) -> None:
    obs = parser.add_argument_group("observability")
    obs.add_argument(
        "--metrics-port",
        type=port,
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
    """The reason the `serve` flags cannot work together, or None."""
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
    if args.leader_elect and args.state is not None and args.slots_configmap is None:
        return (
            "--leader-elect needs the slot ledger in a ConfigMap (followers read it): drop --state"
        )
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
