"""The grpc.aio server: PeerPlane, grpc.health.v1 and server reflection on one port.

PeerPlane is registered through a generic handler whose Stream response serializer
passes bytes through (streams send pre-serialized snapshots); the service descriptor
in the protobuf pool is unchanged, so reflection and grpcurl see the normal API.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio  # type: ignore[attr-defined]
from grpc_reflection.v1alpha import reflection

from controlplane.loop.replica import Replica
from controlplane.metrics import Metrics
from controlplane.publish.store import SnapshotStore
from controlplane.server.agents import AgentRegistry
from controlplane.server.auth import Authenticator
from controlplane.server.fleetmetrics import FleetCollector, FleetCounts, count
from controlplane.server.inspect import Inspection
from controlplane.server.stream import StreamHandler, StreamLimits
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = "peerplane.v1.PeerPlane"
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM contents of the server's certificate chain and key; with `client_ca`, clients
    must present a certificate signed by it (mTLS)."""

    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.cert_chain)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Transport settings. Agents must ping no more often than `min_client_ping_interval_s`."""

    keepalive_time_s: float = 60.0  # server pings idle connections this often
    keepalive_timeout_s: float = 20.0  # and drops them when the ping is not answered
    min_client_ping_interval_s: float = 20.0  # agents may ping every 20 s, even idle
    max_connection_age_s: float = 30 * 60.0  # GOAWAY after this, so agents rebalance
    max_connection_age_grace_s: float = 30.0  # then streams get this long to finish
    max_receive_message_bytes: int = 1 * MiB  # agents only send Hello/Ack/Nack
    max_send_message_bytes: int = 64 * MiB  # a very large fleet's snapshot
    max_concurrent_rpcs: int = 10_000
    stream: StreamLimits = field(default_factory=StreamLimits)
    tls: TlsFiles | None = None  # None: plaintext (serve demands --insecure for that)

    def grpc_options(self) -> list[tuple[str, int]]:
        def ms(seconds: float) -> int:
            return int(seconds * 1000)

        return [
            ("grpc.keepalive_time_ms", ms(self.keepalive_time_s)),
            ("grpc.keepalive_timeout_ms", ms(self.keepalive_timeout_s)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", ms(self.min_client_ping_interval_s)),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_connection_age_ms", ms(self.max_connection_age_s)),
            ("grpc.max_connection_age_grace_ms", ms(self.max_connection_age_grace_s)),
            ("grpc.max_receive_message_length", self.max_receive_message_bytes),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
        ]


def _passthrough(message: bytes) -> bytes:
    return message


class ControlPlaneServer:
    """Serves one SnapshotStore. Health is SERVING once the store has published and
    `set_serving(False)` (a lost leader election, say) has not been called."""

    def __init__(
        self,
        store: SnapshotStore,
        options: ServerOptions | None = None,
        *,
        authenticator: Authenticator | None = None,
        authenticate_agents: bool = True,
        authenticate_inspection: bool | None = None,
        metrics: Metrics | None = None,
        replica: Replica | None = None,
    ) -> None:
        """With an `authenticator`: agents (`authenticate_agents`) must present a token
        bound to the pod their Hello names; inspection RPCs (`authenticate_inspection`)
        need a valid token that is not an agent's. Inspection follows agent
        authentication unless `authenticate_inspection=False` opens it explicitly."""
        if authenticate_inspection is None:
            authenticate_inspection = authenticator is not None and authenticate_agents
        if authenticate_inspection and authenticator is None:
            raise ValueError("authenticate_inspection needs an authenticator")
        self.store = store
        self.options = options or ServerOptions()
        self.metrics = metrics or Metrics()
        self.registry = AgentRegistry()
        self._streams = StreamHandler(
            store,
            self.registry,
            # gRPC's send limit, known to the streams so they say it instead of looping.
            dataclasses.replace(
                self.options.stream, max_message_bytes=self.options.max_send_message_bytes
            ),
            authenticator=authenticator if authenticate_agents else None,
            metrics=self.metrics,
        )
        self._inspection = Inspection(
            store,
            self.registry,
            authenticator=authenticator if authenticate_inspection else None,
            metrics=self.metrics,
            replica=replica,
        )
        self._health = health_aio.HealthServicer()
        self._allowed = True
        # Why the state served no longer follows the cluster (a stuck source, a slot
        # ledger that cannot be persisted): NOT_SERVING while any is set.
        self._problems: dict[str, str] = {}
        self._serving: bool | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fleet: FleetCollector | None = None  # registered while serving
        self._unsubscribe = store.subscribe(self._on_store_change)

    async def start(self, address: str) -> int:
        """Bind `address` (HOST:PORT, port 0 picks one) and serve; returns the bound port."""
        server = grpc.aio.server(
            options=self.options.grpc_options(),
            maximum_concurrent_rpcs=self.options.max_concurrent_rpcs,
        )
        server.add_generic_rpc_handlers([self._peerplane_handler()])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = (SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)
        reflection.enable_server_reflection((*names, reflection.SERVICE_NAME), server)
        if self.options.tls is not None:
            port = server.add_secure_port(address, self.options.tls.credentials())
        else:
            port = server.add_insecure_port(address)
        if port == 0:
            raise OSError(f"cannot listen on {address}")
        self._loop = asyncio.get_running_loop()
        if self._fleet is None:
            self._fleet = FleetCollector(self.fleet_counts, self._loop)
            self.metrics.registry.register(self._fleet)
        await self._refresh_health()
        await server.start()
        self._server = server
        transport = "plaintext" if self.options.tls is None else "TLS"
        if self.options.tls is not None and self.options.tls.client_ca is not None:
            transport = "mTLS"
        log.info("serving peerplane.v1 on %s (port %d, %s)", address, port, transport)
        return port

    async def stop(self, grace_s: float = 5.0) -> None:
        """Health NOT_SERVING, end every stream with OK, then stop within `grace_s`."""
        await self._health.enter_graceful_shutdown()
        self._streams.close_all()
        self._unsubscribe()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        for task in list(self._tasks):
            task.cancel()
        if self._fleet is not None:
            self.metrics.registry.unregister(self._fleet)
            self._fleet = None

    async def set_serving(self, serving: bool) -> None:
        """Leader-election hook: False reports NOT_SERVING whatever the store holds."""
        self._allowed = serving
        await self._refresh_health()

    async def set_source_problem(self, problem: str) -> None:
        """A stuck source ("" once it recovers): NOT_SERVING while set, since the state
        served no longer follows the cluster."""
        await self.set_problem("source", problem)

    async def set_problem(self, kind: str, problem: str) -> None:
        """A reason of `kind` ("" once gone) to report NOT_SERVING: the source is stuck,
        or the leader cannot persist (part of) the slot ledger and does not publish it."""
        if problem:
            self._problems[kind] = problem
        else:
            self._problems.pop(kind, None)
        await self._refresh_health()

    def set_serving_threadsafe(self, serving: bool) -> concurrent.futures.Future[None]:
        """`set_serving` for callbacks on other threads (a leader elector's, say)."""
        if self._loop is None:
            raise RuntimeError("the server is not started")
        return asyncio.run_coroutine_threadsafe(self.set_serving(serving), self._loop)

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    # ------------------------------------------------------------------ internals

    def _peerplane_handler(self) -> grpc.GenericRpcHandler[object, object]:
        handlers = {
            "Stream": grpc.stream_stream_rpc_method_handler(
                self._streams.handle,
                request_deserializer=pb.AgentMessage.FromString,
                response_serializer=_passthrough,
            ),
            "ListWorkloads": grpc.unary_unary_rpc_method_handler(
                self._inspection.list_workloads,
                request_deserializer=pb.ListWorkloadsRequest.FromString,
                response_serializer=pb.ListWorkloadsResponse.SerializeToString,
            ),
            "GetSnapshot": grpc.unary_unary_rpc_method_handler(
                self._inspection.get_snapshot,
                request_deserializer=pb.GetSnapshotRequest.FromString,
                response_serializer=pb.Snapshot.SerializeToString,
            ),
            "ListAgents": grpc.unary_unary_rpc_method_handler(
                self._inspection.list_agents,
                request_deserializer=pb.ListAgentsRequest.FromString,
                response_serializer=pb.ListAgentsResponse.SerializeToString,
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _on_store_change(self) -> None:
        store = self.store
        self.metrics.retained(store.retained_count, store.retained_bytes, store.delta_cache_bytes)
        if self._serving != self._should_serve():
            task = asyncio.get_running_loop().create_task(self._refresh_health())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def fleet_counts(self) -> FleetCounts:
        """Connected agents by workload and sync state, and the oldest pending version's
        age (`peerplane_agents*`): on the event loop, which owns sessions and store."""
        store = self.store
        sessions = list(self.registry.sessions())
        states = (session.state for session in sessions)
        aside = ((session.workload, session.set_aside_count) for session in sessions)
        return count(states, store.workloads(), store.get, time.monotonic(), aside)

    @property
    def serving(self) -> bool:
        """What health reports: SERVING (True) or NOT_SERVING. Safe from any thread."""
        return bool(self._serving)

    def _should_serve(self) -> bool:
        return self._allowed and not self._problems and self.store.has_published

    async def _refresh_health(self) -> None:
        serving = self._should_serve()
        if serving == self._serving:
            return
        self._serving = serving
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ("", SERVICE):
            await self._health.set(service, status)
        log.info(
            "health: %s%s",
            "SERVING" if serving else "NOT_SERVING",
            f" ({'; '.join(self._problems.values())})" if self._problems else "",
        )
