"""`controlplane serve`'s process lifecycle: source -> reconcile loop -> snapshot store ->
gRPC server, started and stopped in order, signals, health and readiness.

The server starts first (so agents connecting early get Waiting and health reports
NOT_SERVING), then the source loads, then the reconcile loop publishes. SIGTERM or SIGINT
ends every stream with OK, finishes the computation in progress (the slot assignment is
always persisted before the snapshots using it are published, so nothing is left to
flush), stops the source and returns 0.

With `--leader-elect` (Kubernetes mode) every replica loads the source, watches the slot
ledger ConfigMap, computes and serves; only the holder of the Lease assigns slots and
writes the ledger (`controlplane.loop.replica`). A follower is ready once it has read the
ledger; the replica taking the Lease continues the ledger as it finds it. The first
computation waits for the first attempt at the Lease, so a replica that takes it at once
publishes its first snapshot with its slots. A leader that loses the Lease while alive
reports NOT_SERVING, closes its streams and exits 1 at once (Kubernetes restarts it as a
follower): it may have a slot write in flight.
What runs is built by `wiring` from the flags; this module only orders it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from typing import TYPE_CHECKING, Any

from controlplane import logformat
from controlplane.cli import flags, wiring
from controlplane.loop.heap import built_without_collector
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.replica import Replica
from controlplane.metrics import Metrics, MetricsServer
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer
from controlplane.server.delivery import DeliveryWait
from controlplane.server.tlscheck import BadTlsFiles
from controlplane.source import Heartbeat, Source
from peerplane.runtime import allocator, heap

if TYPE_CHECKING:
    from controlplane.kube.ledger_watch import LedgerWatch

# The log lines keep the logger name operators and tests know from `serve`.
log = logging.getLogger("controlplane.serve")

STOP_GRACE_S = 5.0
# How long the first computation waits for the first attempt at the Lease (one read and
# one write, each bounded by the elector's request timeout).
FIRST_ROUND_MAX_S = 10.0


def run_serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 1 when startup fails, 2 on bad flags
    or a bad source."""
    logformat.configure(str(args.log_level), str(args.log_format))
    allocator.tune()  # before any thread allocates: the server's, the computation's
    heap.tune_collector()
    if (problem := flags.check(args)) is not None:
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
        tls = wiring.tls_files(args)
    except OSError as err:
        log.error("cannot read the TLS files: %s", err)
        return 2
    except BadTlsFiles as err:
        log.error("%s", err)
        return 2
    if tls is None:
        log.warning("--insecure: the gRPC port serves PLAINTEXT (agents' tokens travel in clear)")
    if (warning := flags.auth_warning(args)) is not None:
        log.warning("%s", warning)
    try:
        api = wiring.kube_api(args)
    except Exception as err:  # the kubernetes config loader's own errors
        log.error("cannot load the Kubernetes client configuration: %s", err)
        return 2
    store = wiring.snapshot_store(args)
    metrics = Metrics()
    replica = Replica(wiring.replica_name())
    server = ControlPlaneServer(
        store,
        wiring.server_options(args, tls),
        authenticator=wiring.authenticator(args, api),
        authenticate_agents=bool(args.authenticate_agents),
        authenticate_inspection=flags.inspection_authenticated(args),
        metrics=metrics,
        replica=replica,
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
        return await _run(args, api, loop, stopping, stop_wait, store, server, metrics, replica)
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
        )
        exporter.start()
    except OSError as err:
        log.error(
            "metrics: cannot listen on %s:%s: %s", args.metrics_address, args.metrics_port, err
        )
        return None
    log.info("metrics on http://%s:%d/metrics", args.metrics_address, exporter.port)
    return exporter


async def _run(
    args: argparse.Namespace,
    api: wiring.KubeApi | None,
    loop: asyncio.AbstractEventLoop,
    stopping: asyncio.Event,
    stop_wait: asyncio.Future[Any],
    store: SnapshotStore,
    server: ControlPlaneServer,
    metrics: Metrics,
    replica: Replica,
) -> int:
    from controlplane.compute import Computer

    try:
        source = wiring.open_source(args, api, metrics)
    except ValueError as err:
        log.error("--source %s: %s", args.source, err)
        await server.stop(0)
        return 2
    computer = Computer(wiring.workload_scope(args))
    compute, recorder = wiring.event_recording(args, api, computer.compute)
    try:
        slots, ledger = wiring.open_ledger(args, api, replica.name, recorder)
    except Exception as err:  # LedgerReadError: a --state file that exists but is unusable
        log.error("%s", err)
        await server.stop(0)
        return 2
    leadership = wiring.leadership(args, api)
    delivered = DeliveryWait(server.registry, store, loop)
    compute, status_writer, on_published = wiring.route_status(
        args, api, source, compute, computer, leadership, metrics, delivered
    )
    reconciler = Reconciler(
        source,
        store,
        slots,
        compute,
        metrics=metrics,
        authority=replica if leadership is not None else None,
        on_published=on_published,
        prepare=computer.prepare,
        prepare_pending=computer.prepare_pending,
    )
    wiring.ledger_drift(slots, reconciler.on_change)
    wiring.ledger_fence(slots, leadership)
    replica.attach(
        published=lambda: store.has_published,
        waiting=lambda: reconciler.waiting,
        lease=leadership.elector if leadership is not None else None,
        ledger=ledger,
        unpersisted=lambda: reconciler.unpersisted,
    )
    reporting = asyncio.ensure_future(_report(replica, metrics, server))
    heartbeat = asyncio.ensure_future(watch_source(source, server))
    reporting.add_done_callback(lambda _: heartbeat.cancel())
    if ledger is not None:
        # Followers compute with the ledger: its changes wake their loop. The replica
        # that assigns is woken by the ledger only for a shard it must write again
        # (`ledger_drift`): the echo of its own writes would cost a whole empty step.
        ledger.start(lambda: None if replica.assigning() else reconciler.on_change())
    with built_without_collector():  # the first list builds most of the heap
        starting = loop.run_in_executor(None, source.start, reconciler.on_change)
        await _first(starting, stop_wait)
    if not starting.done() or (error := starting.exception()) is not None:
        if starting.done():
            log.error("source %s failed to start: %s", args.source, error)
        reporting.cancel()
        await _shutdown(server, source, None, ledger)
        return 0 if not starting.done() else 1  # 0: stopped while the source loaded
    replica.synced()

    if leadership is not None:
        log.info("campaigning for lease %s/%s", args.lease_namespace, args.lease_name)
        leadership.start()
        promoting = asyncio.ensure_future(_promote(leadership.elected, reconciler, metrics))
        await _first_round(leadership.first_round, stop_wait)
    else:
        metrics.leader.set(1)
    running = asyncio.ensure_future(reconciler.run())
    lost = asyncio.ensure_future(leadership.lost.wait() if leadership else stopping.wait())
    await _first(running, stop_wait, lost)
    reporting.cancel()
    if leadership is not None:
        promoting.cancel()
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
    await _shutdown(server, source, running, ledger)
    if leadership is not None:
        await leadership.stop()  # releases the Lease after the last slot write
    if recorder is not None:
        recorder.close()
    if status_writer is not None:
        status_writer.close()
    return code


async def _first_round(done: asyncio.Event, stop_wait: asyncio.Future[Any]) -> None:
    """Wait (at most FIRST_ROUND_MAX_S) for the first attempt at the Lease before the
    first computation. A replica that takes it computes its first snapshot with the slots
    it assigns; computing before would publish every backend without slots as a follower
    with an empty ledger does, and at the first start of a large cluster the agents then
    applied every slot of every backend again through the runtime API (8,000 Services:
    160,000 slot changes, over 100 s)."""
    waiting = asyncio.ensure_future(done.wait())
    try:
        await asyncio.wait(
            [waiting, stop_wait], timeout=FIRST_ROUND_MAX_S, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        waiting.cancel()
    if not done.is_set() and not stop_wait.done():
        log.warning(
            "no answer on the lease within %.0fs: computing as a follower meanwhile",
            FIRST_ROUND_MAX_S,
        )


async def _promote(elected: asyncio.Event, reconciler: Reconciler, metrics: Metrics) -> None:
    """On taking the Lease: recompute at once, now assigning slots (the endpoints
    followers kept waiting get theirs, the ledger continued as written)."""
    await elected.wait()
    metrics.leader.set(1)
    reconciler.on_change()


async def _report(
    replica: Replica, metrics: Metrics, server: ControlPlaneServer, every_s: float = 1.0
) -> None:
    """Keep the replica metrics current and log each change of readiness or role."""
    said = ("", "")
    ledger_said = ""
    while True:
        status = replica.status()
        metrics.replica(
            status.role,
            status.cause,
            status.ledger_version,
            status.endpoints_waiting,
            len(status.ledger_problems),
        )
        unpersisted = status.not_ready_reason if status.cause == "ledger-write" else ""
        if unpersisted != ledger_said:  # health: what is unwritten is not published
            await server.set_problem("ledger", unpersisted)
            ledger_said = unpersisted
        if (status.role, status.not_ready_reason) != said:
            if status.ready:
                log.info("ready as %s (leader %s)", status.role, status.leader or "unknown")
            else:
                log.warning("not ready (%s): %s", status.role, status.not_ready_reason)
            said = (status.role, status.not_ready_reason)
        await asyncio.sleep(every_s)


async def watch_source(source: Source, server: ControlPlaneServer, every_s: float = 1.0) -> None:
    """Health follows the source's heartbeat: a stuck source (a blocked read) serves a
    state that no longer follows the cluster, so NOT_SERVING, with the reason logged."""
    if not isinstance(source, Heartbeat):
        return
    said = ""
    while True:
        problem = source.stalled()
        if problem != said:
            if problem:
                log.warning("source stalled, health NOT_SERVING: %s", problem)
            else:
                log.info("source recovered")
            await server.set_source_problem(problem)
            said = problem
        await asyncio.sleep(every_s)  # a poll period, not a synchronisation


async def _shutdown(
    server: ControlPlaneServer,
    source: Source,
    running: asyncio.Future[None] | None,
    ledger: LedgerWatch | None = None,
) -> None:
    log.info("stopping: closing streams")
    await server.stop(STOP_GRACE_S)
    if running is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(running, STOP_GRACE_S)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, source.stop)
    if ledger is not None:
        await loop.run_in_executor(None, ledger.stop)
    log.info("stopped")
