"""The unary inspection RPCs operators call with `controlplane status` or grpcurl: workloads
(and the replica that answers: role, leader, readiness, ledger version, endpoints waiting),
snapshots (the current version, or one of the few the store still holds), agents."""

from __future__ import annotations

import logging

import grpc

from controlplane.logformat import fields
from controlplane.loop.replica import Replica
from controlplane.metrics import Metrics
from controlplane.publish.store import SnapshotStore
from controlplane.server.agents import AgentRegistry
from controlplane.server.auth import Authenticator, Denied
from peerplane.runtime.untrusted import REPLY_CHARS, clean
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[object, object]
MAX_LISTED = 20  # workloads named in a NOT_FOUND message


class Inspection:
    """ListWorkloads, GetSnapshot and ListAgents over the store and the agent registry."""

    def __init__(
        self,
        store: SnapshotStore,
        registry: AgentRegistry,
        *,
        authenticator: Authenticator | None = None,
        metrics: Metrics | None = None,
        replica: Replica | None = None,
    ) -> None:
        self._store = store
        self._replica = replica
        self._registry = registry
        self._authenticator = authenticator
        self._metrics = metrics

    async def _check_caller(self, context: Context) -> None:
        """With authentication on: a valid token, and not an HAProxy pod's own token (an
        agent may read its own workload's snapshot only, through its stream)."""
        if self._authenticator is None:
            return
        try:
            identity = await self._authenticator.authenticate(context.invocation_metadata())
        except Denied as denied:
            code, reason = denied.code, denied.message
        else:
            if not identity.pod or self._store.workload_of(identity.pod) is None:
                return
            code = grpc.StatusCode.PERMISSION_DENIED
            reason = f"agent token of pod {identity.pod} may not call inspection RPCs"
        log.warning(
            "inspection call refused (%s): %s",
            code.name,
            reason,
            extra=fields(event="refused", code=code.name, reason=reason),
        )
        if self._metrics is not None:
            self._metrics.refused(code.name)
        await context.abort(code, reason)

    async def list_workloads(
        self, request: pb.ListWorkloadsRequest, context: Context
    ) -> pb.ListWorkloadsResponse:
        await self._check_caller(context)
        response = pb.ListWorkloadsResponse()
        for workload in self._store.workloads():
            published = self._store.get(workload)
            if published is None:
                continue
            content = published.content
            agents = self._registry.sessions(workload)
            response.workloads.append(
                pb.WorkloadSummary(
                    workload=workload,
                    version=published.version,
                    content_hash=published.content_hash,
                    peers=content.peers,
                    backends=content.backends,
                    warnings=content.warnings,
                    agents_in_sync=sum(a.acked_hash == published.content_hash for a in agents),
                    agents_connected=len(agents),
                    endpoints_waiting=self._replica.waiting(workload) if self._replica else 0,
                )
            )
        if self._replica is not None:
            status = self._replica.status()
            response.replica.CopyFrom(
                pb.ReplicaStatus(
                    name=status.name,
                    role=status.role,
                    leader=status.leader,
                    ready=status.ready,
                    not_ready_reason=status.not_ready_reason,
                    ledger_version=status.ledger_version,
                    endpoints_waiting=status.endpoints_waiting,
                    ledger_problems=list(status.ledger_problems),
                )
            )
        return response

    async def get_snapshot(self, request: pb.GetSnapshotRequest, context: Context) -> pb.Snapshot:
        await self._check_caller(context)
        if not request.workload:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                'workload is required, e.g. {"workload": "namespace/Kind/name"}',
            )
        published = self._store.get(request.workload)
        if published is None:
            known = self._store.workloads()
            listed = ", ".join(known[:MAX_LISTED]) + (" ..." if len(known) > MAX_LISTED else "")
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"workload '{clean(request.workload, REPLY_CHARS)}' is not known; "
                f"known workloads: {listed or 'none'}",
            )
        if not request.version or request.version == published.version:
            return published.snapshot()
        older = self._store.snapshot_at(request.workload, request.version)
        if older is None:
            held = ", ".join(map(str, self._store.versions_held(request.workload)))
            why = (
                f"is not held: the current version is {published.version}"
                if request.version > published.version
                else "is no longer held (the control plane keeps the last few versions)"
            )
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"version {request.version} of {request.workload} {why}; versions held: {held}",
            )
        return older

    async def list_agents(
        self, request: pb.ListAgentsRequest, context: Context
    ) -> pb.ListAgentsResponse:
        await self._check_caller(context)
        sessions = self._registry.sessions(request.workload)
        agents = []
        for session in sessions:
            current = self._store.get(session.workload) if session.workload else None
            agents.append(session.to_proto(current.version if current is not None else 0))
        return pb.ListAgentsResponse(agents=agents)
