"""`controlplane serve`: source -> reconcile loop -> snapshot store -> gRPC server.

The server starts first (so agents connecting early get Waiting and health reports
NOT_SERVING), then the source loads, then the reconcile loop publishes. SIGTERM or SIGINT
ends every stream with OK, finishes the computation in progress (the slot assignment is
always persisted before the snapshots using it are published, so nothing is left to
flush), stops the source and returns 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
from pathlib import Path
from typing import Any

from controlplane.model import DEFAULT_HAPROXY_SELECTOR, DEFAULT_SETTINGS_CONFIGMAP, ObjectRef
from controlplane.reconcile import AssignmentStore, Reconciler
from controlplane.server import ControlPlaneServer
from controlplane.source import Source
from controlplane.store import SnapshotStore

log = logging.getLogger("controlplane.serve")

DEFAULT_LISTEN = "127.0.0.1:18000"
STOP_GRACE_S = 5.0
LOG_LEVELS = ("debug", "info", "warning", "error")


def _source_spec(text: str) -> str:
    kind, sep, argument = text.partition(":")
    if kind == "files" and sep and argument:
        return text
    raise argparse.ArgumentTypeError(f"expected files:DIR, got {text!r}")


def _listen_address(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT (port 0 picks one), got {text!r}")
    return text


def _object_ref(text: str) -> ObjectRef:
    try:
        return ObjectRef.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `controlplane serve`."""
    parser.add_argument(
        "--source",
        type=_source_spec,
        required=True,
        help="where the cluster state comes from: files:DIR (a folder of manifests)",
    )
    parser.add_argument(
        "--listen",
        type=_listen_address,
        default=DEFAULT_LISTEN,
        help=f"gRPC address HOST:PORT (default {DEFAULT_LISTEN}, loopback for development; "
        "use 0.0.0.0:18000 or [::]:18000 in a cluster)",
    )
    parser.add_argument(
        "--configmap",
        type=_object_ref,
        default=ObjectRef.parse(DEFAULT_SETTINGS_CONFIGMAP),
        help=f"settings ConfigMap NAMESPACE/NAME (default {DEFAULT_SETTINGS_CONFIGMAP})",
    )
    parser.add_argument(
        "--haproxy-selector",
        default=DEFAULT_HAPROXY_SELECTOR,
        help=f"label selector of the HAProxy pods (default {DEFAULT_HAPROXY_SELECTOR})",
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="slot assignment state file; without it slots are kept in memory only",
    )
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="default info")


def open_source(args: argparse.Namespace) -> Source:
    """Build the source named by --source (the one place new source kinds plug in)."""
    kind, _, argument = str(args.source).partition(":")
    if kind == "files":
        from controlplane.source.files import FilesSource

        directory = Path(argument)
        if not directory.is_dir():
            raise ValueError(f"{directory} is not a directory")
        return FilesSource(directory, args.configmap, args.haproxy_selector)
    raise ValueError(f"unknown source {args.source!r}")


def open_slot_store(args: argparse.Namespace) -> AssignmentStore:
    from controlplane.slotstore import FileSlotStore, MemorySlotStore

    if args.state is None:
        log.warning("no --state: the slot assignment is not persisted across restarts")
        return MemorySlotStore()
    return FileSlotStore(Path(args.state))


def run_serve(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop, 1 when startup fails, 2 on a bad source."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        force=True,
    )
    return asyncio.run(_serve(args))


async def _first(*aws: asyncio.Future[Any]) -> None:
    await asyncio.wait(aws, return_when=asyncio.FIRST_COMPLETED)


async def _serve(args: argparse.Namespace) -> int:
    from controlplane.compute import Computer

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    stop_wait = asyncio.ensure_future(stopping.wait())

    store = SnapshotStore()
    server = ControlPlaneServer(store)
    try:
        port = await server.start(args.listen)
    except (OSError, RuntimeError) as err:
        log.error("cannot listen on %s: %s", args.listen, err)
        return 1
    host = str(args.listen).rpartition(":")[0]
    log.info("listening on %s:%d", host, port)

    try:
        source = open_source(args)
    except ValueError as err:
        log.error("--source %s: %s", args.source, err)
        await server.stop(0)
        return 2
    reconciler = Reconciler(source, store, open_slot_store(args), Computer().compute)
    starting = loop.run_in_executor(None, source.start, reconciler.on_change)
    await _first(starting, stop_wait)
    if not starting.done():  # stopped while the source was still loading
        await _shutdown(server, source, None)
        return 0
    if (error := starting.exception()) is not None:
        log.error("source %s failed to start: %s", args.source, error)
        await _shutdown(server, source, None)
        return 1

    running = asyncio.ensure_future(reconciler.run())
    await _first(running, stop_wait)
    code = 0
    if running.done() and (error := running.exception()) is not None:
        log.error("reconcile loop failed: %s", error, exc_info=error)
        code = 1
    reconciler.stop()
    await _shutdown(server, source, running)
    return code


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
