"""`controlplane serve`: source -> reconcile loop -> snapshot store -> gRPC server.

The server starts first (so agents connecting early get Waiting and health reports
NOT_SERVING), then the source loads, then the reconcile loop publishes. SIGTERM or SIGINT
ends every stream with OK, finishes the computation in progress (the slot assignment is
always persisted before the snapshots using it are published, so nothing is left to
flush), stops the source and returns 0.

With `--leader-elect` (Kubernetes mode) the source loads on every replica, but only the
holder of the Lease runs the reconcile loop; a replica that loses the Lease reports
NOT_SERVING, closes its streams and exits 1 at once (Kubernetes restarts it as a follower).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane import logformat, serveopts
from controlplane.metrics import Metrics, MetricsServer
from controlplane.model import ObjectRef
from controlplane.reconcile import AssignmentStore, ComputeFn, Reconciler
from controlplane.server import ControlPlaneServer
from controlplane.source import Source
from controlplane.sourceargs import add_source_arguments, object_ref, workload_scope
from controlplane.store import SnapshotStore

if TYPE_CHECKING:
    from controlplane.events import EventRecorder
    from controlplane.leader import AsyncLeadership

log = logging.getLogger("controlplane.serve")

DEFAULT_LISTEN = "127.0.0.1:18000"
STOP_GRACE_S = 5.0
DEFAULT_LEASE = "peerplane-controlplane"
DEFAULT_NAMESPACE = "haproxy-system"
DEFAULT_SLOTS = "peerplane-slots"
LOG_LEVELS = ("debug", "info", "warning", "error")


def _source_spec(text: str) -> str:
    kind, sep, argument = text.partition(":")
    if (kind == "files" and sep and argument) or text == "kubernetes":
        return text
    raise argparse.ArgumentTypeError(f"expected files:DIR or kubernetes, got {text!r}")


def _listen_address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (port 0 picks one), got {text!r}")
    return text


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `controlplane serve`."""
    parser.add_argument(
        "--source",
        type=_source_spec,
        required=True,
        help="where the cluster state comes from: files:DIR (a folder of manifests) or "
        "kubernetes (the API server)",
    )
    parser.add_argument(
        "--listen",
        type=_listen_address,
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
        help="only the holder of a coordination.k8s.io Lease computes and serves",
    )
    kube.add_argument("--lease-name", default=DEFAULT_LEASE, help=f"default {DEFAULT_LEASE}")
    kube.add_argument(
        "--lease-duration",
        type=float,
        default=15.0,
        help="seconds a follower waits before taking an unrenewed lease (default 15; "
        "the leader renews every duration/7.5 and gives up after 2/3 of it)",
    )
    kube.add_argument(
        "--lease-namespace",
        default=os.environ.get("POD_NAMESPACE") or DEFAULT_NAMESPACE,
        help=f"default $POD_NAMESPACE, else {DEFAULT_NAMESPACE}",
    )
    kube.add_argument(
        "--slots-configmap",
        type=object_ref,
        help=f"ConfigMap NAMESPACE/NAME holding the slot assignment (default with "
        f"--source kubernetes and no --state: LEASE_NAMESPACE/{DEFAULT_SLOTS})",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default info")
    serveopts.add_arguments(parser)


def open_source(args: argparse.Namespace) -> Source:
    """Build the source named by --source (the one place new source kinds plug in)."""
    kind, _, argument = str(args.source).partition(":")
    if args.leader_elect and kind != "kubernetes":
        raise ValueError("--leader-elect needs --source kubernetes")
    if kind == "kubernetes":
        from controlplane.source.kubernetes import KubernetesSource, load_api_client

        return KubernetesSource(
            load_api_client(args.kubeconfig),
            settings=args.configmap,
            haproxy_selector=args.haproxy_selector,
        )
    if kind == "files":
        from controlplane.source.files import FilesSource

        directory = Path(argument)
        if not directory.is_dir():
            raise ValueError(f"{directory} is not a directory")
        return FilesSource(directory, args.configmap, args.haproxy_selector)
    raise ValueError(f"unknown source {args.source!r}")


def open_slot_store(args: argparse.Namespace) -> AssignmentStore:
    from controlplane.slotstore import FileSlotStore, MemorySlotStore

    slots_configmap = args.slots_configmap
    if slots_configmap is None and args.state is None and args.source == "kubernetes":
        slots_configmap = ObjectRef(args.lease_namespace, DEFAULT_SLOTS)
    if slots_configmap is not None:
        from controlplane.kubeslots import ConfigMapSlotStore
        from controlplane.source.kubernetes import load_api_client

        return ConfigMapSlotStore(load_api_client(args.kubeconfig), slots_configmap)
    if args.state is None:
        log.warning("no --state: the slot assignment is not persisted across restarts")
        return MemorySlotStore()
    return FileSlotStore(Path(args.state))


def run_serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 1 when startup fails, 2 on bad flags
    or a bad source."""
    logformat.configure(str(args.log_level), str(args.log_format))
    if (problem := serveopts.check(args)) is not None:
        log.error("%s", problem)
        return 2
    return asyncio.run(_serve(args))


async def _first(*aws: asyncio.Future[Any]) -> None:
    await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)


async def _serve(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    stop_wait = asyncio.ensure_future(stopping.wait())

    try:
        tls = serveopts.tls_files(args)
    except OSError as err:
        log.error("cannot read the TLS files: %s", err)
        return 2
    if tls is None:
        log.warning("--insecure: the gRPC port serves PLAINTEXT (agents' tokens travel in clear)")
    if (warning := serveopts.auth_warning(args)) is not None:
        log.warning("%s", warning)
    store = SnapshotStore()
    metrics = Metrics()
    server = ControlPlaneServer(
        store,
        serveopts.server_options(args, tls),
        authenticator=serveopts.authenticator(args),
        authenticate_agents=bool(args.authenticate_agents),
        authenticate_inspection=serveopts.inspection_authenticated(args),
        metrics=metrics,
    )
    try:
        port = await server.start(args.listen)
    except (OSError, RuntimeError) as err:
        log.error("cannot listen on %s: %s", args.listen, err)
        return 1
    host = str(args.listen).rpartition(":")[0]
    log.info("listening on %s:%d", host, port)
    exporter = _metrics_server(args, metrics, server)
    if exporter is None and args.metrics_port is not None:
        await server.stop(0)
        return 1
    try:
        return await _run(args, loop, stopping, stop_wait, store, server, metrics)
    finally:
        if exporter is not None:
            exporter.stop()


def _metrics_server(
    args: argparse.Namespace, metrics: Metrics, server: ControlPlaneServer
) -> MetricsServer | None:
    if args.metrics_port is None:
        return None
    try:
        exporter = MetricsServer(
            metrics, args.metrics_address, args.metrics_port, lambda: server.serving
        ).start()
    except OSError as err:
        log.error(
            "metrics: cannot listen on %s:%s: %s", args.metrics_address, args.metrics_port, err
        )
        return None
    log.info("metrics on http://%s:%d/metrics", args.metrics_address, exporter.port)
    return exporter


async def _run(
    args: argparse.Namespace,
    loop: asyncio.AbstractEventLoop,
    stopping: asyncio.Event,
    stop_wait: asyncio.Future[Any],
    store: SnapshotStore,
    server: ControlPlaneServer,
    metrics: Metrics,
) -> int:
    from controlplane.compute import Computer

    try:
        source = open_source(args)
    except ValueError as err:
        log.error("--source %s: %s", args.source, err)
        await server.stop(0)
        return 2
    compute, recorder = _with_events(args, Computer(workload_scope(args)).compute)
    reconciler = Reconciler(source, store, open_slot_store(args), compute, metrics=metrics)
    starting = loop.run_in_executor(None, source.start, reconciler.on_change)
    await _first(starting, stop_wait)
    if not starting.done():  # stopped while the source was still loading
        await _shutdown(server, source, None)
        return 0
    if (error := starting.exception()) is not None:
        log.error("source %s failed to start: %s", args.source, error)
        await _shutdown(server, source, None)
        return 1

    leadership = _leadership(args)
    if leadership is not None:
        log.info("waiting for lease %s/%s", args.lease_namespace, args.lease_name)
        leadership.start()
        await _first(asyncio.ensure_future(leadership.elected.wait()), stop_wait)
        if not leadership.elected.is_set():  # stopped while a follower
            await leadership.stop()
            await _shutdown(server, source, None)
            return 0
    metrics.leader.set(1)
    running = asyncio.ensure_future(reconciler.run())
    lost = asyncio.ensure_future(leadership.lost.wait() if leadership else stopping.wait())
    await _first(running, stop_wait, lost)
    code = 0
    if leadership is not None and leadership.lost.is_set() and not stopping.is_set():
        log.error("lost the lease: stopping at once")
        await server.set_serving(False)
        code = 1
    metrics.leader.set(0)
    lost.cancel()
    if running.done() and (error := running.exception()) is not None:
        log.error("reconcile loop failed: %s", error, exc_info=error)
        code = 1
    reconciler.stop()
    await _shutdown(server, source, running)
    if leadership is not None:
        await leadership.stop()  # releases the Lease after the last slot write
    if recorder is not None:
        recorder.close()
    return code


def _with_events(
    args: argparse.Namespace, compute: ComputeFn
) -> tuple[ComputeFn, EventRecorder | None]:
    """With --source kubernetes, rejections also become Events on their objects."""
    if args.source != "kubernetes":
        return compute, None
    from controlplane.events import EventRecorder, recording
    from controlplane.source.kubernetes import load_api_client

    recorder = EventRecorder(load_api_client(args.kubeconfig), host=os.environ.get("POD_NAME", ""))
    return recording(compute, recorder), recorder


def _leadership(args: argparse.Namespace) -> AsyncLeadership | None:
    if not args.leader_elect:
        return None
    from controlplane.leader import AsyncLeadership, LeaseTimings
    from controlplane.source.kubernetes import load_api_client

    api = load_api_client(args.kubeconfig)
    duration = float(args.lease_duration)
    timings = LeaseTimings(duration, duration * 2 / 3, duration * 2 / 15)
    return AsyncLeadership(
        api, namespace=args.lease_namespace, name=args.lease_name, timings=timings
    )


async def _shutdown(
    server: ControlPlaneServer, source: Source, running: asyncio.Future[None] | None
) -> None:
    log.info("stopping: closing streams")
    await server.stop(STOP_GRACE_S)
    if running is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, STOP_GRACE_S)
    await asyncio.get_running_loop().run_in_executor(None, source.stop)
    log.info("stopped")
