"""Every flag of `controlplane compute` and `controlplane serve`: names, argparse types,
defaults, and the combinations that cannot work together.

Parsing only: nothing here opens a file, a socket or the Kubernetes API; `wiring` turns
the parsed flags into objects. `--source` is parsed once, into a `SourceSpec`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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
from controlplane.settings.values import is_dns_label
from controlplane.settings.workloads import DEFAULT_MAX_WORKLOADS, DEFAULT_WORKLOAD_KINDS
from controlplane.source.convert import DEFAULT_HAPROXY_SELECTOR
from controlplane.status.command import add_arguments as add_status_arguments

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

_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """`--source`, parsed: `files:DIR` (a folder of manifests) or `kubernetes`."""

    kind: str  # "files" or "kubernetes"
    directory: Path | None = None  # set for "files"
    text: str = ""  # as given, for messages

    def __str__(self) -> str:
        return self.text

    @property
    def kubernetes(self) -> bool:
        return self.kind == "kubernetes"


def source_spec(text: str) -> SourceSpec:
    """argparse type for `serve --source`: files:DIR or kubernetes."""
    kind, sep, argument = text.partition(":")
    if kind == "files" and sep and argument:
        return SourceSpec("files", Path(argument), text)
    if text == "kubernetes":
        return SourceSpec("kubernetes", None, text)
    raise argparse.ArgumentTypeError(f"expected files:DIR or kubernetes, got {text!r}")


def files_source(text: str) -> SourceSpec:
    """argparse type for `compute --source`: files:DIR only."""
    kind, sep, rest = text.partition(":")
    if kind != "files" or not sep or not rest:
        raise argparse.ArgumentTypeError(f"expected files:DIR, got {text!r}")
    return SourceSpec("files", Path(rest), text)


def object_ref(text: str) -> ObjectRef:
    """argparse type for NAMESPACE/NAME."""
    try:
        return ObjectRef.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _names(text: str, check: re.Pattern[str] | None, what: str) -> frozenset[str]:
    names = frozenset(item.strip() for item in text.split(",") if item.strip())
    bad = sorted(n for n in names if not (check.fullmatch(n) if check else is_dns_label(n)))
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
    return names


def namespaces(text: str) -> frozenset[str]:
    """argparse type for NS[,NS...]."""
    return _names(text, None, "namespaces")


def kinds(text: str) -> frozenset[str]:
    """argparse type for KIND[,KIND...] (Kubernetes kinds: DaemonSet, Deployment, ...)."""
    return _names(text, _KIND, "kinds such as DaemonSet,Deployment")


def positive_int(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {text!r}")
    return int(text)


def non_negative_int(text: str) -> int:
    # 18 digits: int() of thousands of digits raises (a traceback, not a usage error).
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return int(text)


INT32_MAX = 2**31 - 1
"""gRPC takes message sizes and milliseconds as C ints: larger values overflow."""
MAX_SECONDS = 24 * 86400.0
MAX_BUDGET_BYTES = 2**40
"""Largest memory budget flag (1 TiB): anything larger is a typo, not a sizing."""
"""Longest duration flag: 24 days of milliseconds still fit an int32."""


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = non_negative_int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer from {low} to {high}, got {text!r}"
            )
        return value

    return parse


def seconds_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number of seconds in [low, high] (inf, nan and 1e300 are
    refused here, not by a traceback from gRPC or the lease timer)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a number of seconds, got {text!r}"
            ) from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"expected seconds from {low:g} to {high:g}, got {text!r}"
            )
        return value

    return parse


def port(text: str) -> int:
    value = non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port (0 picks one), got {text!r}")
    return value


def listen_address(text: str) -> str:
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (port 0 picks one), got {text!r}")
    return text


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
