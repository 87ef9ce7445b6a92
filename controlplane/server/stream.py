"""The agent stream's I/O: admission, then a writer loop and a reader task (xDS rules,
docs/design.md "The agent stream").

What to send and how an Ack/Nack changes the stream is decided by the pure
`protocol`; who may open a stream by `admission`. This module only moves bytes and then
logs and counts what was decided. One coroutine per stream writes, one task reads. Store
changes only set the stream's wake-up event; the writer then looks at the *latest*
version, so a slow agent never queues more than one pending version and never holds up
other streams. Writes are bounded in number (a semaphore shared by all streams) and in
time (a slow consumer is disconnected and will reconnect).
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
from controlplane.publish.store import SnapshotStore
from controlplane.server import protocol, reports
from controlplane.server.admission import Admission, Refused
from controlplane.server.agents import AgentRegistry, AgentSession
from controlplane.server.auth import Authenticator, Identity
from controlplane.server.peers import peer_address, peer_host
from controlplane.server.ratelimit import DEFAULT_OPENS_BURST, DEFAULT_OPENS_PER_S, PeerRateLimit
from peerplane.runtime.untrusted import clean
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[pb.AgentMessage, bytes]
MAX_OVERSIZE_REMEMBERED = 10_000
"""Agents whose oversize message was logged, remembered to log it once each."""
# ReportTerms as a ServerMessage: prepended to a message (serialized messages joined are
# merged), or sent alone.
TERMS = pb.ServerMessage(
    report_terms=pb.ReportTerms(max_tables=reports.MAX_TABLES)
).SerializeToString()


@dataclass(frozen=True, slots=True)
class StreamLimits:
    hello_timeout_s: float = 30.0  # a stream that never says Hello is dropped
    send_timeout_s: float = 30.0  # a write that takes longer drops the stream
    max_concurrent_sends: int = 256  # writes in flight across all streams
    max_streams_per_peer: int = 0  # open streams per peer host; 0 = unlimited
    deltas: bool = True  # send deltas to agents that accept them (--no-deltas: never)
    max_message_bytes: int = 0  # gRPC's send limit (ServerOptions sets it); 0 = none
    opens_per_s: float = DEFAULT_OPENS_PER_S  # stream opens per peer host; 0 = unlimited
    opens_burst: int = DEFAULT_OPENS_BURST  # opens a peer host may make at once
    partial_reports: bool = True  # merge partial reports of agents that send them


class _TooLarge(Exception):
    """The message for an agent exceeds the send limit: gRPC would fail the write with
    RESOURCE_EXHAUSTED and the agent reconnect into the same failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
        self._admission = Admission(
            authenticator,
            max_streams_per_peer=self._limits.max_streams_per_peer,
            hello_timeout_s=self._limits.hello_timeout_s,
            opens=PeerRateLimit(self._limits.opens_per_s, self._limits.opens_burst),
        )
        self._metrics = metrics or Metrics()
        self._send_slots = asyncio.Semaphore(self._limits.max_concurrent_sends)
        self._closing = False
        self._wakers: set[asyncio.Event] = set()
        # Agent -> content hash whose oversize was logged: said once per agent and content,
        # not on every reconnect.
        self._oversize_said: dict[str, str] = {}
        self._retained_said: tuple[int, int, int] | None = None  # the gauges' last figures

    def close_all(self) -> None:
        """End every stream with OK (shutdown): agents reconnect elsewhere."""
        self._closing = True
        for wake in list(self._wakers):
            wake.set()

    async def handle(self, requests: AsyncIterator[pb.AgentMessage], context: Context) -> None:
        try:
            admitted = await self._admission.admit(
                peer_host(context.peer()), context.invocation_metadata(), requests
            )
        except Refused as refused:
            await self._refuse(context, refused)
            raise  # not reached: abort raises
        try:
            await self._serve(requests, context, admitted.hello, admitted.identity)
        finally:
            self._admission.release(admitted)

    async def _refuse(self, context: Context, refused: Refused) -> None:
        """Log the refusal, count it, and end the call with its code (raises)."""
        code = refused.code
        if refused.logged:
            log.warning(
                "stream refused (%s): %s",
                code.name,
                refused.reason,
                extra=fields(
                    event="refused",
                    code=code.name,
                    reason=refused.reason,
                    peer=refused.peer,
                    agent=refused.agent,
                ),
            )
        if refused.counted:
            self._metrics.refused(code.name)
        hint = None
        if refused.retry_after_s is not None:  # gRPC's retry pushback, in milliseconds
            hint = (("grpc-retry-pushback-ms", str(int(refused.retry_after_s * 1000) + 1)),)
        await context.abort(code, refused.reason, trailing_metadata=hint or ())

    async def _serve(
        self,
        requests: AsyncIterator[pb.AgentMessage],
        context: Context,
        hello: pb.Hello,
        identity: Identity | None,
    ) -> None:
        session = self._registry.open(
            hello,
            peer_address(context.peer()),
            deltas=self._limits.deltas,
            partial_reports=self._limits.partial_reports,
        )
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
        tracked = ""  # the workload this agent is counted in for convergence
        wake = asyncio.Event()
        self._wakers.add(wake)
        unsubscribe = self._store.subscribe(wake.set)
        reader = asyncio.create_task(self._read(requests, session, wake))
        try:
            while not self._closing and not reader.done():
                try:
                    message = self._next_message(session)
                except _TooLarge as too_large:
                    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, too_large.reason)
                if session.workload != tracked:  # resolved (or moved): converge it there
                    self._metrics.convergence.disconnected(tracked, id(session))
                    tracked = session.workload
                    self._metrics.convergence.connected(tracked, id(session))
                    if session.state.pending is None:  # told InSync: it runs that version
                        self._metrics.convergence.acked(
                            tracked, id(session), session.state.acked_version
                        )
                if session.take_terms():  # with the Hello's answer, or alone
                    message = TERMS + (message or b"")
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
            self._metrics.convergence.disconnected(tracked, id(session))
            reader.cancel()
            log.info(
                "agent %s disconnected",
                session.pod,
                extra=fields(event="disconnected", agent=session.pod, workload=session.workload),
            )
            await asyncio.gather(reader, return_exceptions=True)
            await self._registry.changed()

    # ------------------------------------------------------------------ downstream

    def _next_message(self, session: AgentSession) -> bytes | None:
        """Step the protocol; the bytes to send now, logged and counted, or None."""
        target = protocol.resolve(self._store, session.pod, session.state.workload)
        session.state, decision = protocol.next_message(session.state, target)
        if decision is None:
            return None
        if isinstance(decision, protocol.SendWaiting):
            log.info("agent %s waiting: %s", session.pod, decision.reason)
            return pb.ServerMessage(waiting=pb.Waiting(reason=decision.reason)).SerializeToString()
        published = decision.published
        if isinstance(decision, protocol.SendInSync):
            log.info(
                "agent %s in sync with %s v%d", session.pod, published.workload, published.version
            )
            in_sync = pb.InSync(version=published.version, content_hash=published.content_hash)
            return pb.ServerMessage(in_sync=in_sync).SerializeToString()
        sent = decision.sent
        session.sent(sent.nonce)
        shared: bytes | None = None
        kind = "snapshot"
        if isinstance(decision, protocol.SendDelta):
            delta = self._store.delta_message(published.workload, sent.content_hash, sent.base)
            if delta is not None:  # None only if the store moved on: the snapshot will do
                shared, kind = delta, "delta"
                self._count_retained()
        if shared is None:  # built on the first full snapshot of a version, then shared
            shared = published.message_bytes  # ServerMessage(snapshot=...)
        # The shared bytes hold ServerMessage(snapshot=...) or (delta=...); protobuf
        # merges them with the stream's nonce.
        message = pb.ServerMessage(nonce=sent.nonce).SerializeToString() + shared
        self._check_size(session, published, kind, len(message))
        # A delta per agent per change is detail (debug): the publication and each agent's
        # Ack say what operators follow; a full snapshot (a connect, a resync) is news.
        level = logging.DEBUG if kind == "delta" else logging.INFO
        if log.isEnabledFor(level):
            log.log(
                level,
                "%s sent to %s: %s v%d%s",
                kind,
                session.pod,
                published.workload,
                published.version,
                f" (from {sent.base[:12]})" if kind == "delta" else "",
                extra=fields(
                    event=f"{kind}_sent",
                    agent=session.pod,
                    workload=published.workload,
                    version=published.version,
                    nonce=sent.nonce,
                ),
            )
        if kind == "delta":
            self._metrics.delta_sent(published.workload, len(message))
        else:
            self._metrics.sent(published.workload, len(message))
            if isinstance(decision, protocol.SendSnapshot) and decision.resync:
                self._metrics.resynced(published.workload)
        return message

    def _count_retained(self) -> None:
        """The store's retained versions and delta cache as gauges, set only when they
        changed: once per version (its delta built), not once per agent sent it."""
        store = self._store
        figures = (store.retained_count, store.retained_bytes, store.delta_cache_bytes)
        if figures != self._retained_said:
            self._retained_said = figures
            self._metrics.retained(*figures)

    def _check_size(
        self, session: AgentSession, published: protocol.PublishedVersion, kind: str, size: int
    ) -> None:
        """Raise _TooLarge when a `size`-byte message exceeds the send limit: warned once
        per agent and content (with both sizes), counted every time, never logged as
        sent."""
        limit = self._limits.max_message_bytes
        if not limit or size <= limit:
            return
        reason = (
            f"{kind} of {published.workload} v{published.version} is {size} bytes, above "
            f"the control plane's --max-send-message-bytes {limit}"
        )
        self._metrics.too_large(published.workload)
        if self._oversize_said.get(session.pod) != published.content_hash:
            if len(self._oversize_said) >= MAX_OVERSIZE_REMEMBERED:
                self._oversize_said.clear()
            self._oversize_said[session.pod] = published.content_hash
            log.warning(
                "%s not sent to %s: %s; raise --max-send-message-bytes",
                kind,
                session.pod,
                reason,
                extra=fields(
                    event=f"{kind}_too_large",
                    agent=session.pod,
                    workload=published.workload,
                    version=published.version,
                ),
            )
        raise _TooLarge(reason)

    async def _send(self, context: Context, session: AgentSession, message: bytes) -> None:
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
                if self._receive(session, message):
                    wake.set()  # a resync is owed: the writer sends the full snapshot
                await self._registry.changed()
        finally:
            wake.set()  # the writer notices the reader is done and ends the stream

    def _receive(self, session: AgentSession, message: pb.AgentMessage) -> bool:
        """Step the protocol with one upstream message, then log and count the outcome;
        True when the writer has something to send now (a resync, ReportTerms)."""
        kind = message.WhichOneof("message")
        if kind == "report":  # what the agent says about itself: kept, bounded
            if not session.reported(message.report):
                log.debug(
                    "agent %s: report too soon after the last one, or partial after one "
                    "not kept; ignored",
                    session.pod,
                )
            return session.terms_owed  # the writer sends ReportTerms: a full report next
        before = session.state
        outcome: protocol.Acked | protocol.Nacked | protocol.Stale | protocol.Ignored
        if kind == "ack":
            session.state, outcome = protocol.on_ack(before, message.ack.nonce)
        elif kind == "nack":
            session.state, outcome = protocol.on_nack(
                before, message.nack.nonce, message.nack.error, message.nack.resync
            )
        else:
            session.state, outcome = protocol.on_other(before, kind or "an empty message")
        workload = session.state.workload
        if isinstance(outcome, protocol.Acked):
            ack = message.ack
            session.acked(
                ack.applied_by, set_aside=ack.set_aside, set_aside_count=ack.set_aside_count
            )
            version = outcome.sent.version
            log.info(
                "agent %s acked %s v%d",
                session.pod,
                workload,
                version,
                extra=fields(event="ack", agent=session.pod, workload=workload, version=version),
            )
            self._metrics.acked(
                workload, time.monotonic() - outcome.sent.since, id(session), version
            )
        elif isinstance(outcome, protocol.Nacked):
            version = outcome.sent.version
            log.warning(
                "agent %s rejected %s v%d (stays on v%d): %s",
                session.pod,
                workload,
                version,
                before.acked_version,
                clean(outcome.error, protocol.MAX_NACK_ERROR_CHARS) or "(no error text)",
                extra=fields(
                    event="nack",
                    agent=session.pod,
                    workload=workload,
                    version=version,
                    reason=outcome.error,
                ),
            )
            self._metrics.nacked(workload)
            return outcome.resync
        elif isinstance(outcome, protocol.Stale):
            log.debug(
                "agent %s: stale %s (nonce %s, last sent %s) ignored",
                session.pod,
                outcome.what,
                clean(outcome.nonce, 32),
                before.last_nonce,
            )
        else:
            log.warning("agent %s sent %s after Hello; ignored", session.pod, outcome.kind)
        return False
