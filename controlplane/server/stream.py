"""The agent stream: Hello first, then snapshots down and Acks/Nacks up (xDS rules).

One coroutine per stream writes, one task reads. Store changes only set the stream's
wake-up event; the writer then looks at the *latest* version, so a slow agent never
queues more than one pending version and never holds up other streams. Writes are
bounded in number (a semaphore shared by all streams) and in time (a slow consumer is
disconnected and will reconnect).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from controlplane.logformat import fields
from controlplane.metrics import Metrics
from controlplane.server.agents import AgentRegistry, AgentSession, Sent
from controlplane.server.auth import Authenticator, Denied, Identity
from controlplane.server.peers import PeerStreams, peer_address, peer_host
from controlplane.store import Published, SnapshotStore
from peerplane.untrusted import clean
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)

# Longest value accepted per Hello field (Kubernetes: namespace 63, pod and node names
# 253). Longer is refused with INVALID_ARGUMENT before the value is logged or stored.
HELLO_LIMITS = {
    "pod_namespace": 63,
    "pod_name": 253,
    "node_name": 253,
    "applied_content_hash": 128,
    "agent_version": 128,
}
MAX_NACK_ERROR_CHARS = 4096  # NACK text kept for ListAgents and logged


def hello_problem(hello: pb.Hello) -> str | None:
    """Why this Hello is refused, or None. The reason never echoes the value."""
    if not hello.pod_namespace or not hello.pod_name:
        return "Hello needs pod_namespace and pod_name"
    for name, limit in HELLO_LIMITS.items():
        value: str = getattr(hello, name)
        if len(value) > limit:
            return f"Hello {name} is {len(value)} characters long (at most {limit})"
        if clean(value, limit) != value:
            return f"Hello {name} contains control characters or backslashes"
    return None


@dataclass(frozen=True, slots=True)
class StreamLimits:
    hello_timeout_s: float = 30.0  # a stream that never says Hello is dropped
    send_timeout_s: float = 30.0  # a write that takes longer drops the stream
    max_concurrent_sends: int = 256  # writes in flight across all streams
    max_streams_per_peer: int = 0  # open streams per peer host; 0 = unlimited


class StreamHandler:
    """Implements PeerPlane/Stream; responses are pre-serialized bytes."""

    def __init__(
        self,
        store: SnapshotStore,
        registry: AgentRegistry,
        limits: StreamLimits | None = None,
        *,
        authenticator: Authenticator | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._store = store
        self._registry = registry
        self._limits = limits or StreamLimits()
        self._authenticator = authenticator
        self._metrics = metrics or Metrics()
        self._peers = PeerStreams(self._limits.max_streams_per_peer)
        self._send_slots = asyncio.Semaphore(self._limits.max_concurrent_sends)
        self._closing = False
        self._wakers: set[asyncio.Event] = set()

    def close_all(self) -> None:
        """End every stream with OK (shutdown): agents reconnect elsewhere."""
        self._closing = True
        for wake in list(self._wakers):
            wake.set()

    async def handle(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
    ) -> None:
        host = peer_host(context.peer())
        if not self._peers.acquire(host):
            await self._refuse(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many streams from {host} (limit {self._peers.limit})",
                peer=host,
            )
        try:
            identity = await self._authenticate(context, host)
            hello = await self._read_hello(requests, context)
            if identity is not None:
                await self._authorize(context, identity, hello, host)
            await self._serve(requests, context, hello, identity)
        finally:
            self._peers.release(host)

    async def _refuse(
        self,
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
        code: grpc.StatusCode,
        reason: str,
        *,
        peer: str,
        agent: str | None = None,
    ) -> None:
        """Log the refusal, count it, and end the call with `code` (raises)."""
        log.warning(
            "stream refused (%s): %s",
            code.name,
            reason,
            extra=fields(event="refused", code=code.name, reason=reason, peer=peer, agent=agent),
        )
        self._metrics.refused(code.name)
        await context.abort(code, reason)

    async def _authenticate(
        self, context: grpc.aio.ServicerContext[pb.AgentMessage, bytes], host: str
    ) -> Identity | None:
        if self._authenticator is None:
            return None
        try:
            return await self._authenticator.authenticate(context.invocation_metadata())
        except Denied as denied:
            await self._refuse(context, denied.code, denied.message, peer=host)
            raise  # not reached: abort raises

    async def _authorize(
        self,
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
        identity: Identity,
        hello: pb.Hello,
        host: str,
    ) -> None:
        """The token must be bound to the very pod the Hello names."""
        named = f"{hello.pod_namespace}/{hello.pod_name}"
        if not identity.pod:
            reason = f"token of {identity.username} is not bound to a pod (Hello names {named})"
        elif identity.pod != named:
            reason = f"token of pod {identity.pod} cannot speak for pod {named}"
        else:
            return
        await self._refuse(
            context, grpc.StatusCode.PERMISSION_DENIED, reason, peer=host, agent=named
        )

    async def _serve(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
        hello: pb.Hello,
        identity: Identity | None,
    ) -> None:
        session = self._registry.open(hello, peer_address(context.peer()))
        if identity is not None:
            session.identity = identity.username
        log.info(
            "agent %s connected from %s (node %s, applied %s)",
            session.pod,
            session.peer_address,
            session.node_name or "?",
            hello.applied_content_hash[:12] or "nothing",
            extra=fields(event="connected", agent=session.pod, peer=session.peer_address),
        )
        self._metrics.connected_agents.inc()
        wake = asyncio.Event()
        self._wakers.add(wake)
        unsubscribe = self._store.subscribe(wake.set)
        reader = asyncio.create_task(self._read(requests, session, wake))
        try:
            while not self._closing and not reader.done():
                message = self._next_message(session)
                if message is not None:
                    await self._send(context, session, message)
                    # This stream's copy (nonce + shared snapshot bytes) is sent: do not keep
                    # it alive while idle. Holding it cost ~60 KiB per connected agent.
                    message = None
                    await self._registry.changed()
                await wake.wait()
                wake.clear()
        finally:
            # Synchronous cleanup first: it must happen even if this task is cancelled again.
            unsubscribe()
            self._wakers.discard(wake)
            self._registry.close(session)
            self._metrics.connected_agents.dec()
            reader.cancel()
            log.info(
                "agent %s disconnected",
                session.pod,
                extra=fields(event="disconnected", agent=session.pod, workload=session.workload),
            )
            await asyncio.gather(reader, return_exceptions=True)
            await self._registry.changed()

    async def _read_hello(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
    ) -> pb.Hello:
        try:
            async with asyncio.timeout(self._limits.hello_timeout_s):
                first = await anext(requests)
        except StopAsyncIteration:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "stream closed before Hello")
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "no Hello received in time")
        if not first.HasField("hello"):
            kind = first.WhichOneof("message") or "an empty message"
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"the first message must be a Hello, got {kind}"
            )
        hello = first.hello
        problem = hello_problem(hello)
        if problem is not None:
            log.warning(
                "stream refused (INVALID_ARGUMENT): %s",
                problem,
                extra=fields(event="refused", code="INVALID_ARGUMENT", reason=problem),
            )
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return hello

    # ------------------------------------------------------------------ downstream

    def _resolve(self, session: AgentSession) -> tuple[Published | None, str]:
        """The version this agent should run, or the reason it cannot be served yet."""
        workload = self._store.workload_of(session.pod)
        if workload is None and session.workload and self._store.get(session.workload):
            # A pod leaving the mapping (being deleted) keeps its workload while it drains.
            workload = session.workload
        if workload is None:
            if not self._store.has_published:
                return None, "no snapshot computed yet"
            return None, f"pod {session.pod} is not a known HAProxy pod"
        session.workload = workload
        published = self._store.get(workload)
        if published is None:
            return None, f"workload {workload} has no snapshot"
        return published, ""

    def _next_message(self, session: AgentSession) -> bytes | None:
        """The bytes to send now, or None when the agent has (or was sent) the latest."""
        published, reason = self._resolve(session)
        if published is None:
            if reason == session.waiting_reason and session.answered:
                return None
            session.answered = True
            session.waiting_reason = reason
            log.info("agent %s waiting: %s", session.pod, reason)
            return pb.ServerMessage(waiting=pb.Waiting(reason=reason)).SerializeToString()
        was_waiting = bool(session.waiting_reason)
        session.waiting_reason = ""
        target = published.content_hash
        # After a Waiting, an agent that runs the content still needs its InSync.
        if (not session.answered or was_waiting) and target == session.acked_hash:
            session.answered = True
            session.sent_hash = target
            session.acked_version = published.version
            log.info(
                "agent %s in sync with %s v%d", session.pod, published.workload, published.version
            )
            return pb.ServerMessage(
                in_sync=pb.InSync(version=published.version, content_hash=target)
            ).SerializeToString()
        if session.answered:
            if target == session.sent_hash:
                return None  # sent already (pending, acked or nacked): never twice in a row
            if session.pending is None and target == session.acked_hash:
                return None  # the agent runs it (after a Nack, content went back)
        session.answered = True
        nonce = session.next_nonce()
        session.sent_hash = target
        since = max(published.published_at, session.opened_at)
        session.pending = Sent(nonce, published.version, target, since)
        log.info(
            "snapshot sent to %s: %s v%d",
            session.pod,
            published.workload,
            published.version,
            extra=fields(
                event="snapshot_sent",
                agent=session.pod,
                workload=published.workload,
                version=published.version,
                nonce=nonce,
            ),
        )
        self._metrics.sent(published.workload)
        return pb.ServerMessage(nonce=nonce).SerializeToString() + published.message_bytes

    async def _send(
        self,
        context: grpc.aio.ServicerContext[pb.AgentMessage, bytes],
        session: AgentSession,
        message: bytes,
    ) -> None:
        async with self._send_slots:
            try:
                async with asyncio.timeout(self._limits.send_timeout_s):
                    await context.write(message)
            except TimeoutError:
                log.warning(
                    "agent %s too slow to receive a snapshot; closing its stream", session.pod
                )
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE, "agent too slow to receive; reconnect"
                )

    # ------------------------------------------------------------------ upstream

    async def _read(
        self, requests: AsyncIterator[pb.AgentMessage], session: AgentSession, wake: asyncio.Event
    ) -> None:
        try:
            async for message in requests:
                kind = message.WhichOneof("message")
                if kind == "ack":
                    self._on_ack(session, message.ack)
                elif kind == "nack":
                    self._on_nack(session, message.nack)
                else:
                    session.ignored_messages += 1
                    log.warning(
                        "agent %s sent %s after Hello; ignored",
                        session.pod,
                        kind or "an empty message",
                    )
                await self._registry.changed()
        finally:
            wake.set()  # the writer notices the reader is done and ends the stream

    def _take_pending(self, session: AgentSession, nonce: str, what: str) -> Sent | None:
        pending = session.pending
        if pending is None and what == "Ack":
            pending = session.nacked  # an Ack after a Nack: the agent's retry succeeded
        if pending is None or nonce != session.last_nonce or nonce != pending.nonce:
            session.ignored_messages += 1
            log.debug(
                "agent %s: stale %s (nonce %s, last sent %s) ignored",
                session.pod,
                what,
                clean(nonce, 32),
                session.last_nonce,
            )
            return None
        session.pending = session.nacked = None
        return pending

    def _on_ack(self, session: AgentSession, ack: pb.Ack) -> None:
        sent = self._take_pending(session, ack.nonce, "Ack")
        if sent is None:
            return
        session.acked_version = sent.version
        session.acked_hash = sent.content_hash
        session.last_nack_error = ""
        session.last_nack_version = 0
        log.info(
            "agent %s acked %s v%d",
            session.pod,
            session.workload,
            sent.version,
            extra=fields(
                event="ack", agent=session.pod, workload=session.workload, version=sent.version
            ),
        )
        self._metrics.acked(session.workload, time.monotonic() - sent.since)

    def _on_nack(self, session: AgentSession, nack: pb.Nack) -> None:
        sent = self._take_pending(session, nack.nonce, "Nack")
        if sent is None:
            return
        session.nacked = sent
        error = nack.error.strip()[:MAX_NACK_ERROR_CHARS]
        session.last_nack_error = error
        session.last_nack_version = sent.version
        log.warning(
            "agent %s rejected %s v%d (stays on v%d): %s",
            session.pod,
            session.workload,
            sent.version,
            session.acked_version,
            clean(error, MAX_NACK_ERROR_CHARS) or "(no error text)",
            extra=fields(
                event="nack",
                agent=session.pod,
                workload=session.workload,
                version=sent.version,
                reason=error,
            ),
        )
        self._metrics.nacked(session.workload)
