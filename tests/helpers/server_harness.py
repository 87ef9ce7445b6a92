"""An in-process control-plane server on a free loopback port, and scripted agents.

Agents read the raw response bytes (a pass-through deserializer) so tests can check
that every stream of a workload receives the very same serialized snapshot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from types import TracebackType
from typing import Any, TypeVar

import grpc

from controlplane.publish.content import SnapshotContent
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer, ServerOptions
from controlplane.server.agents import AgentSession
from controlplane.server.stream import StreamLimits
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc

T = TypeVar("T")
WAIT_S = 5.0
NS = "haproxy-system"
W1 = "haproxy-system/DaemonSet/haproxy"
W2 = "edge/Deployment/edge-haproxy"


def run(coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run one async test body on a fresh event loop, bounded in time."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def snapshot(
    workload: str, *addresses: str, peers: tuple[str, ...] = ("haproxy-a",)
) -> SnapshotContent:
    """A small snapshot whose content (and hash) follows `addresses` and `peers`."""
    snap = pb.Snapshot(workload=workload)
    snap.peers.name = "localinstance"
    snap.peers.port = 10000
    for i, name in enumerate(peers, start=1):
        snap.peers.peers.append(pb.Peer(name=name, address=f"127.0.1.{i}", port=10000))
    backend = snap.backends.add(name="default_shop_http", service="default/shop", mode="http")
    backend.balance = "source"
    for index, address in enumerate(addresses, start=1):
        backend.slots.append(
            pb.Slot(
                index=index,
                server_name=f"SRV_{index}",
                address=address,
                port=8888,
                enabled=True,
            )
        )
    return SnapshotContent.from_message(snap)


def bearer(token: str) -> tuple[tuple[str, str], ...] | None:
    """Call metadata carrying `token` the way agents send it."""
    return (("authorization", f"Bearer {token}"),) if token else None


class Agent:
    """One agent stream, driven step by step by a test."""

    accepts_deltas = False  # said in the Hello (`DeltaAgent` sets it)
    partial_reports = False  # said in the Hello: it sends partial reports under terms

    def __init__(
        self, channel: grpc.aio.Channel, pod: str, namespace: str = NS, token: str = ""
    ) -> None:
        self.pod = pod
        self.namespace = namespace
        method = channel.stream_stream(
            "/peerplane.v1.PeerPlane/Stream",
            request_serializer=pb.AgentMessage.SerializeToString,
            response_deserializer=lambda raw: raw,
        )
        self.call: Any = method(metadata=bearer(token))

    async def hello(self, applied_hash: str = "", applied_version: int = 0) -> None:
        hello = pb.Hello(
            contract=CONTRACT,
            pod_namespace=self.namespace,
            pod_name=self.pod,
            node_name="node-a",
            applied_content_hash=applied_hash,
            applied_version=applied_version,
            agent_version="test",
            accepts_deltas=self.accepts_deltas,
            partial_reports=self.partial_reports,
        )
        await self.call.write(pb.AgentMessage(hello=hello))

    async def recv_raw(self, timeout: float = WAIT_S) -> bytes:
        raw = await asyncio.wait_for(self.call.read(), timeout)
        assert isinstance(raw, bytes), f"stream ended: {raw!r}"
        return raw

    async def recv(self, timeout: float = WAIT_S) -> pb.ServerMessage:
        return pb.ServerMessage.FromString(await self.recv_raw(timeout))

    async def recv_snapshot(self) -> pb.ServerMessage:
        message = await self.recv()
        assert message.WhichOneof("message") == "snapshot", message
        assert message.nonce, "a snapshot must carry a nonce"
        return message

    async def ack(self, message: pb.ServerMessage, nonce: str | None = None) -> None:
        snap = message.snapshot
        ack = pb.Ack(
            nonce=message.nonce if nonce is None else nonce,
            version=snap.version,
            content_hash=snap.content_hash,
        )
        await self.call.write(pb.AgentMessage(ack=ack))

    async def nack(self, message: pb.ServerMessage, error: str) -> None:
        snap = message.snapshot
        nack = pb.Nack(
            nonce=message.nonce,
            version=snap.version,
            content_hash=snap.content_hash,
            error=error,
        )
        await self.call.write(pb.AgentMessage(nack=nack))

    def close(self) -> None:
        self.call.cancel()


def without_partial_reports(store: SnapshotStore) -> ControlPlaneServer:
    """A server that takes no partial reports (on the wire, as one older than them): for
    `Harness(server=...)`."""
    options = ServerOptions(stream=StreamLimits(partial_reports=False))
    return ControlPlaneServer(store, options=options)


class Harness:
    """Server + client channel; `async with Harness() as h:`."""

    def __init__(
        self,
        server: Callable[[SnapshotStore], ControlPlaneServer] | None = None,
        store: SnapshotStore | None = None,
    ) -> None:
        """`server` builds the server (options, authentication) around the store;
        `store` replaces the default one (budgets)."""
        self.store = store if store is not None else SnapshotStore()
        self.server = server(self.store) if server is not None else ControlPlaneServer(self.store)
        self.port = 0
        self._agents: list[Agent] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Harness:
        self.port = await self.server.start("127.0.0.1:0")
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = peerplane_pb2_grpc.PeerPlaneStub(self.channel)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for agent in self._agents:
            agent.close()
        await self.channel.close()
        await self.server.stop(0.5)

    def agent(self, pod: str, namespace: str = NS, token: str = "") -> Agent:
        agent = Agent(self.channel, pod, namespace, token)
        self._agents.append(agent)
        return agent

    def publish(
        self, snapshots: Mapping[str, SnapshotContent], pods: Mapping[str, str] | None = None
    ) -> list[str]:
        return self.store.publish(snapshots, pods)

    def session(self, pod: str) -> AgentSession | None:
        for session in self.server.registry.sessions():
            if session.pod == f"{NS}/{pod}" or session.pod == pod:
                return session
        return None

    async def until(self, predicate: Callable[[], bool]) -> None:
        """Wait for a server-side agent state change that makes `predicate()` true."""
        await self.server.registry.wait_until(predicate, WAIT_S)

    async def agents(self, workload: str = "") -> list[pb.AgentStatus]:
        response = await self.stub.ListAgents(pb.ListAgentsRequest(workload=workload))
        return list(response.agents)


async def stream_status(address: str, pod: str, token: str) -> grpc.StatusCode | str:
    """What the server answers a stream opening with `token` and a Hello for `pod`. A
    token is refused from the metadata, before the Hello is read; when the Hello's write
    crosses that refusal, gRPC's client reports INTERNAL ("execute_batch") instead of
    the server's status (seen once in CI), so that one race is tried again, twice."""
    for _ in range(3):
        async with grpc.aio.insecure_channel(address) as channel:
            agent = Agent(channel, pod, token=token)
            try:
                await agent.hello()
                message = await agent.recv()
            except grpc.aio.AioRpcError as err:
                crossed = "execute_batch" in (err.debug_error_string() or "")
                if err.code() == grpc.StatusCode.INTERNAL and crossed:
                    continue
                code: grpc.StatusCode = err.code()
                return code
            return str(message.WhichOneof("message"))
    raise AssertionError("the Hello crossed the server's answer three times")
