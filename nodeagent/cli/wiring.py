"""From parsed flags (`flags.py`) to the agent's objects, and nothing else.

Starts nothing: `lifecycle.py` runs what is built here. Flags that cannot make an
agent are a `WiringError` whose text is logged before exiting 2.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, replace

from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.config.descriptors import Budget
from nodeagent.config.render import RenderOptions
from nodeagent.haproxy import openfiles, sockrepair, version
from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.supervisor import Supervisor
from nodeagent.heap import Heap
from nodeagent.metrics import AgentMetrics, MetricsServer
from nodeagent.readiness import Readiness, held_state
from nodeagent.report import Reporter
from nodeagent.stream import transport
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.runtime.httpserve import MetricsHttpServer

log = logging.getLogger("nodeagent")


class WiringError(Exception):
    """The flags cannot make an agent (missing identity, bad TLS files, socket paths)."""


@dataclass(frozen=True)
class Agent:
    """Everything `nodeagent run` starts and stops."""

    applier: Applier
    client: Client
    supervisor: Supervisor | None  # --manage-haproxy
    metrics_server: MetricsServer | None  # --metrics-port
    readiness_server: MetricsHttpServer | None = None  # --readiness-port: /readyz alone


def render_version(args: argparse.Namespace) -> version.Version:
    """`nodeagent render`: the HAProxy version to render for (VersionError when bad)."""
    if args.haproxy_version:
        return version.parse_argument(args.haproxy_version)
    if args.haproxy_bin:
        return version.probe(args.haproxy_bin)
    return version.OLDEST_SUPPORTED


def render_options(args: argparse.Namespace) -> RenderOptions:
    """`nodeagent render`'s options (VersionError when the version cannot be had)."""
    opts = RenderOptions(
        args.pod_name, args.bind_address, args.runtime_socket, haproxy_version=render_version(args)
    )
    if args.maps_dir:
        opts = replace(opts, maps_dir=os.path.abspath(args.maps_dir).rstrip("/"))
    if args.certs_dir:
        opts = replace(opts, certs_dir=os.path.abspath(args.certs_dir).rstrip("/"))
    return opts


def serving_version(haproxy_bin: str) -> tuple[version.Version | None, str]:
    """The version of the binary the agent serves with and its release ("3.0.11", for
    the Hello and the reports); None and "" (render only what every version accepts)
    when it cannot be learned."""
    try:
        text = version.banner(haproxy_bin)
        found, release = version.parse_banner(text), version.parse_release(text)
    except version.VersionError as e:
        log.warning("%s; rendering without version-dependent keywords", e)
        return None, ""
    log.info("serving with HAProxy %s (%s)", release, haproxy_bin)
    return found, release


def descriptor_budget(haproxy_bin: str, opts: RenderOptions, metrics: AgentMetrics) -> Budget:
    """The open files HAProxy may use: this process's hard limit, its soft one raised to it
    first (a managed HAProxy inherits both; an external one, in the same pod, gets the
    same from the container runtime), and the threads HAProxy runs here."""
    limit = openfiles.raise_soft_limit()
    if limit is not None:
        metrics.open_files_limit.set(limit)
    return Budget(limit, openfiles.default_threads(haproxy_bin), opts.haproxy_version)


def build_agent(args: argparse.Namespace) -> Agent:
    """`nodeagent run`'s objects from its flags; WiringError when they cannot be built."""
    if not args.pod_namespace or not args.pod_name:
        raise WiringError(
            "pod identity missing: --pod-namespace/--pod-name or POD_NAMESPACE/POD_NAME"
        )
    problem = transport.check(args)
    if problem:
        raise WiringError(problem)
    try:
        security = transport.Transport.from_args(args)
    except OSError as e:
        raise WiringError(f"cannot read TLS file: {e}") from e
    if not security.secure:
        log.warning("plaintext connection to the control plane (--insecure)")
    state_dir = os.path.abspath(args.state_dir)
    master = args.master_socket or os.path.join(state_dir, "master.sock")
    runtime = args.runtime_socket or os.path.join(state_dir, "runtime.sock")
    for path in (master, runtime):
        if not sockrepair.socket_path_ok(path):
            raise WiringError(f"socket path too long for a UNIX socket: {path}")
    serving, release = serving_version(args.haproxy_bin)
    opts = RenderOptions(
        args.pod_name, args.bind_address, os.path.abspath(runtime), haproxy_version=serving
    )
    haproxy = HAProxy(
        master,
        runtime,
        args.haproxy_bin,
        sync_wait=args.sync_wait,
        check_timeout=args.check_timeout,
    )
    metrics = AgentMetrics()
    supervisor = None
    if args.manage_haproxy:
        supervisor = Supervisor(
            os.path.abspath(args.config),
            master,
            os.path.join(state_dir, "haproxy.pid"),
            args.haproxy_bin,
            on_restart=metrics.haproxy_restarts.inc,
        )
    applier = Applier(
        opts,
        args.config,
        StateStore(state_dir),
        haproxy,
        supervisor,
        metrics=metrics,
        budget=descriptor_budget(args.haproxy_bin, opts, metrics),
    )
    identity = Identity(args.pod_namespace, args.pod_name, args.node_name, release)
    client = Client(
        args.control_plane,
        identity,
        applier,
        transport=security,
        metrics=metrics,
        deltas=args.deltas,
        reporter=Reporter(haproxy.runtime, release, metrics, args.report_interval),
        heap=Heap(),
    )
    metrics_server = readiness_server = None
    if args.metrics_port is not None or args.readiness_port is not None:  # last: they bind
        readiness = Readiness(
            lambda: held_state(applier.applied, opts.pod_name),
            master,
            runtime,
            bound=args.sync_wait,
            metrics=metrics,
        )
        address = args.metrics_address
        try:
            if args.metrics_port is not None:
                metrics_server = MetricsServer(metrics, address, args.metrics_port, readiness.probe)
            if args.readiness_port is not None:
                readiness_server = MetricsHttpServer(
                    None, address, args.readiness_port, readiness.probe
                )
        except OSError as e:  # the process exits: a port bound already goes with it
            raise WiringError(f"cannot serve metrics or readiness on {address}: {e}") from e
    return Agent(applier, client, supervisor, metrics_server, readiness_server)
