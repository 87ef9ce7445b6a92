"""`nodeagent run` (the agent beside one HAProxy) and `nodeagent render` (inspection)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys

from google.protobuf import json_format

from nodeagent import logformat, transport, version
from nodeagent.applier import Applier, socket_path_ok
from nodeagent.client import Client, Identity
from nodeagent.haproxy import HAProxy
from nodeagent.metrics import AgentMetrics, MetricsServer
from nodeagent.render import RenderError, RenderOptions, render
from nodeagent.state import StateStore
from nodeagent.supervisor import Supervisor
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger("nodeagent")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodeagent", description=__doc__)
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="stream snapshots from the control plane into HAProxy")
    run.add_argument("--control-plane", required=True, metavar="HOST:PORT")
    run.add_argument("--pod-namespace", default=os.environ.get("POD_NAMESPACE", ""))
    run.add_argument("--pod-name", default=os.environ.get("POD_NAME", ""))
    run.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    run.add_argument("--config", required=True, help="haproxy.cfg path the agent owns")
    run.add_argument("--state-dir", required=True, help="where the applied snapshot is kept")
    run.add_argument("--haproxy-bin", default="/usr/sbin/haproxy")
    run.add_argument("--master-socket", help="master CLI socket (default STATE_DIR/master.sock)")
    run.add_argument("--runtime-socket", help="runtime API socket (default STATE_DIR/runtime.sock)")
    run.add_argument("--bind-address", default="0.0.0.0", help="address frontends bind to")
    run.add_argument(
        "--manage-haproxy",
        action="store_true",
        help="start and supervise HAProxy (master-worker) instead of driving an external one",
    )
    run.add_argument("--sync-wait", type=float, default=5.0, help="max wait for peer resync")
    run.add_argument(
        "--check-timeout", type=float, default=15.0, help="seconds haproxy -c may take"
    )
    run.add_argument(
        "--metrics-port", type=int, help="serve /metrics on this port (0 picks one; default off)"
    )
    run.add_argument("--metrics-address", default="127.0.0.1", help="default 127.0.0.1")
    run.add_argument(
        "--log-format", choices=logformat.LOG_FORMATS, default="text", help="text or json"
    )
    transport.add_arguments(run)

    rend = sub.add_parser("render", help="print the haproxy.cfg of a snapshot")
    rend.add_argument("--snapshot", required=True, help="protobuf JSON (grpcurl output), - = stdin")
    rend.add_argument("--pod-name", required=True)
    rend.add_argument("--bind-address", default="0.0.0.0")
    rend.add_argument("--runtime-socket", default="/var/run/haproxy/runtime.sock")
    rend.add_argument(
        "--haproxy-version",
        metavar="X.Y",
        help="render for this HAProxy version (default: ask --haproxy-bin if given, "
        f"else {'.'.join(map(str, version.OLDEST_SUPPORTED))}, the oldest supported)",
    )
    rend.add_argument("--haproxy-bin", help="ask this binary its version (haproxy -v)")
    return parser


def _render_version(args: argparse.Namespace) -> version.Version:
    if args.haproxy_version:
        return version.parse_argument(args.haproxy_version)
    if args.haproxy_bin:
        return version.probe(args.haproxy_bin)
    return version.OLDEST_SUPPORTED


def _serving_version(haproxy_bin: str) -> version.Version | None:
    """The version of the binary the agent serves with; None (render only what every
    version accepts) when it cannot be learned."""
    try:
        found = version.probe(haproxy_bin)
    except version.VersionError as e:
        log.warning("%s; rendering without version-dependent keywords", e)
        return None
    log.info("serving with HAProxy %d.%d (%s)", *found, haproxy_bin)
    return found


def _render(args: argparse.Namespace) -> int:
    if args.snapshot == "-":
        text = sys.stdin.read()
    else:
        with open(args.snapshot, encoding="utf-8") as f:
            text = f.read()
    snapshot = json_format.Parse(text, pb.Snapshot(), ignore_unknown_fields=True)
    try:
        serving = _render_version(args)
        opts = RenderOptions(
            args.pod_name, args.bind_address, args.runtime_socket, haproxy_version=serving
        )
        sys.stdout.write(render(snapshot, opts))
    except (RenderError, version.VersionError) as e:
        print(f"nodeagent render: {e}", file=sys.stderr)
        return 1
    return 0


async def _run(args: argparse.Namespace) -> int:
    if not args.pod_namespace or not args.pod_name:
        log.error("pod identity missing: --pod-namespace/--pod-name or POD_NAMESPACE/POD_NAME")
        return 2
    problem = transport.check(args)
    if problem:
        log.error("%s", problem)
        return 2
    try:
        security = transport.Transport.from_args(args)
    except OSError as e:
        log.error("cannot read TLS file: %s", e)
        return 2
    if not security.secure:
        log.warning("plaintext connection to the control plane (--insecure)")
    state_dir = os.path.abspath(args.state_dir)
    master = args.master_socket or os.path.join(state_dir, "master.sock")
    runtime = args.runtime_socket or os.path.join(state_dir, "runtime.sock")
    for path in (master, runtime):
        if not socket_path_ok(path):
            log.error("socket path too long for a UNIX socket: %s", path)
            return 2
    opts = RenderOptions(
        args.pod_name,
        args.bind_address,
        os.path.abspath(runtime),
        haproxy_version=await asyncio.to_thread(_serving_version, args.haproxy_bin),
    )
    haproxy = HAProxy(
        master,
        runtime,
        args.haproxy_bin,
        sync_wait=args.sync_wait,
        check_timeout=args.check_timeout,
    )
    metrics = AgentMetrics()
    metrics_server = None
    if args.metrics_port is not None:
        try:
            metrics_server = MetricsServer(metrics, args.metrics_address, args.metrics_port)
        except OSError as e:
            log.error(
                "cannot serve metrics on %s:%s: %s", args.metrics_address, args.metrics_port, e
            )
            return 2
        metrics_server.start()
    supervisor = None
    if args.manage_haproxy:
        pidfile = os.path.join(state_dir, "haproxy.pid")
        supervisor = Supervisor(
            os.path.abspath(args.config),
            master,
            pidfile,
            args.haproxy_bin,
            on_restart=metrics.haproxy_restarts.inc,
        )
    applier = Applier(
        opts, args.config, StateStore(state_dir), haproxy, supervisor, metrics=metrics
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.to_thread(applier.restore)
        identity = Identity(args.pod_namespace, args.pod_name, args.node_name)
        client = Client(args.control_plane, identity, applier, transport=security, metrics=metrics)
        client_task = asyncio.create_task(client.run())
        stop_task = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({client_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        client_task.cancel()
        stop_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await client_task
        for task in done:
            if task is client_task and not task.cancelled() and task.exception():
                log.error("client stopped: %s", task.exception())
                return 1
        log.info("stopping")
        return 0
    finally:
        if supervisor is not None:
            await asyncio.to_thread(supervisor.stop)
        if metrics_server is not None:
            metrics_server.stop()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logformat.configure(args.log_level, getattr(args, "log_format", "text"))
    if args.command == "render":
        return _render(args)
    return asyncio.run(_run(args))


if __name__ == "__main__":
    sys.exit(main())
