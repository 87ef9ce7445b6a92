"""Parsed flags -> the objects `serve` and `compute` run with: workload scope, source,
slot ledger, authenticator, server options, Event recording, leadership, route status.

The one Kubernetes ApiClient of the process is made here (`kube_api`), only when a flag
needs the API, and passed to every user; `controlplane.kube` is imported only then, so
files mode without Kubernetes flags never loads the `kubernetes` package.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controlplane.cli.flag_types import SourceSpec
from controlplane.cli.flags import DEFAULT_SLOTS, inspection_authenticated
from controlplane.ledger.store import MemoryLedger, SlotLedger
from controlplane.loop.reconcile import ComputeFn
from controlplane.model import ClusterState, ObjectRef
from controlplane.publish.store import SnapshotStore
from controlplane.server import ServerOptions, StreamLimits, TlsFiles
from controlplane.server.auth import Authenticator
from controlplane.server.tlscheck import check_pem
from controlplane.settings.workloads import WorkloadScope
from controlplane.source import Source

if TYPE_CHECKING:
    from controlplane.compute import Computer
    from controlplane.kube.events import EventRecorder
    from controlplane.kube.leader import AsyncLeadership
    from controlplane.kube.ledger_watch import LedgerWatch
    from controlplane.kube.route_status import RouteStatusWriter
    from controlplane.metrics import Metrics
    from controlplane.snapshot import ComputeResult

# The log lines keep the logger name operators and tests know from `serve`.
log = logging.getLogger("controlplane.serve")

KubeApi = Any  # a kubernetes.client.ApiClient, from controlplane.kube.client


def workload_scope(args: argparse.Namespace) -> WorkloadScope:
    """Which HAProxy pods may form workloads (--workload-namespaces/-kinds, --max-workloads)."""
    return WorkloadScope(args.workload_namespaces, args.workload_kinds, args.max_workloads)


def slots_configmap(args: argparse.Namespace) -> ObjectRef | None:
    """Where the slot ledger lives in the API, if it does: --slots-configmap, or by
    default LEASE_NAMESPACE/peerplane-slots with --source kubernetes and no --state."""
    if args.slots_configmap is not None:
        ref: ObjectRef = args.slots_configmap
        return ref
    source: SourceSpec = args.source
    if args.state is None and source.kubernetes:
        return ObjectRef(args.lease_namespace, DEFAULT_SLOTS)
    return None


def authenticating(args: argparse.Namespace) -> bool:
    """Whether any caller is checked by TokenReview."""
    return bool(args.authenticate_agents) or inspection_authenticated(args)


def needs_kubernetes(args: argparse.Namespace) -> bool:
    """Whether any flag needs the Kubernetes API: the source, a slot ConfigMap, tokens.
    (--leader-elect needs --source kubernetes; `open_source` says so.)"""
    source: SourceSpec = args.source
    return source.kubernetes or slots_configmap(args) is not None or authenticating(args)


def kube_api(args: argparse.Namespace) -> KubeApi | None:
    """The process's one ApiClient (--kubeconfig, else in-cluster), or None when no flag
    needs the API. Raises what the kubernetes config loader raises on a bad config."""
    if not needs_kubernetes(args):
        return None
    from controlplane.kube.client import load_api_client

    return load_api_client(args.kubeconfig)


def open_source(
    args: argparse.Namespace, api: KubeApi | None, metrics: Metrics | None = None
) -> Source:
    """The source named by --source (the one place new source kinds plug in); ValueError
    when it cannot be used."""
    spec: SourceSpec = args.source
    if args.leader_elect and not spec.kubernetes:
        raise ValueError("--leader-elect needs --source kubernetes")
    if spec.kubernetes:
        from controlplane.kube.source import KubernetesSource

        return KubernetesSource(
            api, settings=args.configmap, haproxy_selector=args.haproxy_selector
        )
    if spec.kind == "files" and spec.directory is not None:
        from controlplane.source.files import FilesSource

        if not spec.directory.is_dir():
            raise ValueError(f"{spec.directory} is not a directory")
        return FilesSource(
            spec.directory,
            args.configmap,
            args.haproxy_selector,
            on_parsed=None if metrics is None else metrics.source_files_parsed.inc,
        )
    raise ValueError(f"unknown source {spec}")


def open_ledger(
    args: argparse.Namespace,
    api: KubeApi | None,
    writer: str = "",
    recorder: EventRecorder | None = None,
) -> tuple[SlotLedger, LedgerWatch | None]:
    """The slot ledger: ConfigMap shards (with the watch every replica reads them
    through), a --state file, or memory (warned: not persisted). Raises
    LedgerReadError when --state names something that exists but cannot be used."""
    ref = slots_configmap(args)
    if ref is not None:
        from controlplane.kube.ledger_store import ConfigMapLedger
        from controlplane.kube.ledger_watch import LedgerWatch

        stray = recorder.ledger_stray if recorder is not None else None
        watch = LedgerWatch(api, ref, on_stray=stray)
        refused = recorder.ledger_refused if recorder is not None else None
        return ConfigMapLedger(api, ref, watch, writer=writer, refused=refused), watch
    if args.state is None:
        log.warning("no --state: the slot assignment is not persisted across restarts")
        return MemoryLedger(), None
    from controlplane.ledger.sqlite import FileLedger, check_state_path

    check_state_path(Path(args.state))
    return FileLedger(Path(args.state)), None


def ledger_drift(ledger: SlotLedger, on_change: Callable[[], None]) -> None:
    """A ledger others can edit (the ConfigMap shards) wakes the loop to write it back."""
    on_drift = getattr(ledger, "on_drift", None)
    if on_drift is not None:
        on_drift(on_change)


def ledger_fence(ledger: SlotLedger, leadership: AsyncLeadership | None) -> None:
    """A ledger others write too (the ConfigMap shards) is written only while leading."""
    write_only_while = getattr(ledger, "write_only_while", None)
    if write_only_while is not None and leadership is not None:
        elector = leadership.elector
        write_only_while(lambda: elector.is_leader)


def tls_files(args: argparse.Namespace) -> TlsFiles | None:
    """The PEM files read (OSError when unreadable, BadTlsFiles when they cannot serve);
    None with --insecure."""
    if args.tls_cert is None:
        return None
    check_pem(Path(args.tls_cert), Path(args.tls_key), args.client_ca and Path(args.client_ca))
    client_ca = Path(args.client_ca).read_bytes() if args.client_ca is not None else None
    return TlsFiles(Path(args.tls_cert).read_bytes(), Path(args.tls_key).read_bytes(), client_ca)


def snapshot_store(args: argparse.Namespace) -> SnapshotStore:
    """The store, keeping `--retained-versions` contents per workload as delta bases,
    within `--retained-bytes`, and built deltas within `--delta-cache-bytes`."""
    return SnapshotStore(
        retained_versions=args.retained_versions,
        retained_bytes=args.retained_bytes,
        delta_cache_bytes=args.delta_cache_bytes,
    )


def server_options(args: argparse.Namespace, tls: TlsFiles | None) -> ServerOptions:
    return ServerOptions(
        keepalive_time_s=args.keepalive_time,
        keepalive_timeout_s=args.keepalive_timeout,
        max_connection_age_s=args.max_connection_age,
        max_receive_message_bytes=args.max_receive_message_bytes,
        max_send_message_bytes=args.max_send_message_bytes,
        stream=StreamLimits(
            max_streams_per_peer=args.max_streams_per_peer,
            deltas=not args.no_deltas,
            opens_per_s=args.stream_opens_per_peer,
        ),
        tls=tls,
    )


def authenticator(args: argparse.Namespace, api: KubeApi | None) -> Authenticator | None:
    """A TokenReview authenticator when any authentication flag is on."""
    if not authenticating(args):
        return None
    from controlplane.kube.tokenreview import KubeTokenReviewer

    return Authenticator(KubeTokenReviewer(api), args.token_audience, ttl_s=args.token_cache_ttl)


def event_recording(
    args: argparse.Namespace, api: KubeApi | None, compute: ComputeFn
) -> tuple[ComputeFn, EventRecorder | None]:
    """With --source kubernetes, rejections also become Events on their objects."""
    source: SourceSpec = args.source
    if not source.kubernetes:
        return compute, None
    from controlplane.kube.events import EventRecorder, recording

    recorder = EventRecorder(api, host=os.environ.get("POD_NAME", ""))
    return recording(compute, recorder), recorder


def route_status(
    args: argparse.Namespace,
    api: KubeApi | None,
    source: Source,
    compute: ComputeFn,
    computer: Computer,
    lease: AsyncLeadership | None,
    metrics: Metrics,
    delivered: Callable[[float], bool] | None = None,
) -> tuple[ComputeFn, RouteStatusWriter | None, Callable[[], None] | None]:
    """With --source kubernetes, the route objects' status is written by the Lease holder
    (every process without --leader-elect): each result's route table is handed to the
    writer's thread once published (the third value: the reconcile loop's `on_published`),
    which makes the documents again for what changed (`routes.status_round.StatusRound`) and
    writes those that changed, each round once `delivered` says the agents hold the
    publication (`server.delivery.DeliveryWait`)."""
    spec: SourceSpec = args.source
    if not spec.kubernetes:
        return compute, None, None
    from controlplane.kube.route_status import RouteStatusWriter, Statuses, reporting_status
    from controlplane.routes.status import route_statuses
    from controlplane.routes.status_round import StatusRound

    scope = workload_scope(args)
    made_again = StatusRound(scope)  # used in the writer's thread only

    def leading() -> bool:
        return lease is None or lease.elector.is_leader

    def prepare(state: ClusterState, result: ComputeResult) -> Callable[[], Statuses]:
        table = computer.route_table  # this computation's, read before the next one
        if table is None:
            return lambda: route_statuses(state, scope)
        return lambda: made_again(state, table)

    writer = RouteStatusWriter(
        api,
        leading=leading,
        on_result=metrics.route_status,
        served_versions=getattr(source, "served_versions", None),
        delivered=delivered,
    )
    on_route_deleted = getattr(source, "on_route_deleted", None)
    if on_route_deleted is not None:  # the Kubernetes source: deletions reach the writer
        on_route_deleted(writer.forget)
    reporting = reporting_status(compute, writer, prepare)
    return reporting, writer, reporting.published


def leadership(args: argparse.Namespace, api: KubeApi | None) -> AsyncLeadership | None:
    """The Lease candidate with --leader-elect; renew every duration/7.5, give up after
    2/3 of it (client-go's ratios)."""
    if not args.leader_elect:
        return None
    from controlplane.kube.leader import AsyncLeadership, LeaseTimings

    duration = float(args.lease_duration)
    timings = LeaseTimings(duration, duration * 2 / 3, duration * 2 / 15)
    return AsyncLeadership(
        api, namespace=args.lease_namespace, name=args.lease_name, timings=timings
    )


def replica_name() -> str:
    """This replica's name in ListWorkloads: the pod name, else the host name."""
    return os.environ.get("POD_NAME") or socket.gethostname()
