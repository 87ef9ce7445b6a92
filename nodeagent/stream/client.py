"""The stream to the control plane: Hello, then snapshots down and ACK/NACK up.

Applying can take seconds (haproxy -c, reload, peer resync), so receiving and applying are
separate tasks: while one snapshot is applied, newer ones replace each other in a single
slot and only the latest is applied (reload coalescing; an answer to a superseded nonce
would be stale anyway). The stream reconnects forever; HAProxy keeps serving meanwhile.

With `accepts_deltas` the server may send a SnapshotDelta instead: the reader turns each
into a full, verified snapshot at once (`nodeagent/held.py`), against the last content
sent on this stream, so the apply loop only ever sees full snapshots; a delta that does
not apply is NACKed at once with `resync` and the full snapshot that follows replaces it.

A NACK whose cause may pass (a reload that failed on a port still held by another
process) is followed by retries of the same snapshot with exponential backoff, until it
applies (then the same nonce is ACKed) or a newer snapshot replaces it.

What to do with each server message, what to answer, the coalescing and the retries are
decided by the pure `protocol.py`; this module reads, writes, queues, waits, logs and
counts (every ACK and NACK in one place, `_sent`; what each event logs and counts is
`events.py`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Protocol

import grpc
import grpc.aio
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    wait_random_exponential,
)

from nodeagent import __version__
from nodeagent.apply.outcome import Result
from nodeagent.heap import Heap
from nodeagent.held import ChangeSet, Held
from nodeagent.logformat import fields
from nodeagent.metrics import AgentMetrics
from nodeagent.report import LastApply, Reporter, ReportStream, report_loop, rfc3339
from nodeagent.stream import events, protocol
from nodeagent.stream.protocol import Identity
from nodeagent.stream.transport import TokenError, Transport
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc

log = logging.getLogger(__name__)

KEEPALIVE_MS = 30_000  # the server permits pings every >= 20 s
# gRPC's default 4 MiB refused the full snapshot of ~4,000 Services and more; the control
# plane sends up to 64 MiB (`--max-send-message-bytes`).
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


class SnapshotApplier(Protocol):
    """What the client needs from the applier (nodeagent.apply.applier.Applier in production)."""

    @property
    def applied_hash(self) -> str: ...

    @property
    def applied_version(self) -> int: ...

    @property
    def applied_held(self) -> Held | None:
        """The snapshot the Hello reports, in parts (a new stream's delta base)."""
        ...

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result: ...


class StreamBroken(Exception):
    """The stream failed before the server answered anything: back off and retry."""


class Client:
    """One agent's connection to the control plane."""

    def __init__(
        self,
        target: str,
        identity: Identity,
        applier: SnapshotApplier,
        backoff_max: float = 30.0,
        backoff_multiplier: float = 0.5,
        transport: Transport | None = None,
        metrics: AgentMetrics | None = None,
        retry_initial: float = 1.0,
        deltas: bool = True,
        reporter: Reporter | None = None,
        heap: Heap | None = None,
        partial_reports: bool = True,
    ) -> None:
        # Sends AgentReports beside the answers (`nodeagent/report.py`); None: none.
        self.reporter = reporter
        # Announce partial reports (sent once the control plane's ReportTerms allow them).
        self.partial_reports = partial_reports and reporter is not None
        self._reports: ReportStream | None = None  # the current stream's
        self.last_apply = LastApply()
        self._applied = asyncio.Event()  # an apply finished: a report is due
        self.deltas = deltas  # announce delta support (`nodeagent run --no-deltas`: not)
        self._state = protocol.StreamState()  # the protocol's view of the current stream
        self._write_lock = asyncio.Lock()  # the reader and the apply loop both answer
        self.retry_initial = retry_initial  # first wait before re-applying a retryable NACK
        self.transport = transport if transport is not None else Transport()
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self.target = target
        self.identity = identity
        self.applier = applier
        self.backoff_max = backoff_max
        self.backoff_multiplier = backoff_multiplier
        self.connected = asyncio.Event()
        self._answered = False  # the current stream got a server message
        # Frozen after applies, away from the next change (`nodeagent/heap.py`); None:
        # the process's heap is not the client's (tests).
        self.heap = heap

    def hello(self) -> pb.AgentMessage:
        return protocol.hello(
            self.identity,
            self.applier.applied_hash,
            self.applier.applied_version,
            __version__,
            self.deltas,
            self.partial_reports,
        )

    async def run(self) -> None:
        """Keep a stream open until cancelled."""
        while True:
            retrying = AsyncRetrying(
                wait=wait_random_exponential(
                    multiplier=self.backoff_multiplier, max=self.backoff_max
                ),
                retry=retry_if_exception_type(
                    (StreamBroken, grpc.aio.AioRpcError, OSError, TokenError)
                ),
                before_sleep=lambda rs: log.warning(
                    "no stream to control plane %s (attempt %d, backing off): %s",
                    self.target,
                    rs.attempt_number,
                    rs.outcome.exception() if rs.outcome else "",
                ),
                reraise=True,
            )
            async for attempt in retrying:
                with attempt:
                    await self._one_stream()
            # The stream was up and ended: start over with a fresh, short backoff.
            await asyncio.sleep(self.backoff_multiplier)

    async def _one_stream(self) -> None:
        """One stream: Hello, then the reader, the apply loop and the reports until one ends."""
        options = [
            ("grpc.keepalive_time_ms", KEEPALIVE_MS),
            ("grpc.keepalive_timeout_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
        ]
        metadata = self.transport.metadata()  # re-read: projected tokens rotate
        async with self.transport.channel(self.target, options) as channel:
            stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
            call = stub.Stream(metadata=metadata or None)
            answered = False
            self._write_lock = asyncio.Lock()  # bound to this stream's event loop
            try:
                hello = self._open()
                await call.write(hello)
                log.info(
                    "connected to %s as %s/%s (applied version=%d hash=%.12s)",
                    self.target,
                    self.identity.pod_namespace,
                    self.identity.pod_name,
                    self.applier.applied_version,
                    self.applier.applied_hash,
                )
                latest: asyncio.Queue[protocol.Apply] = asyncio.Queue(maxsize=1)
                self._answered = False
                applier_task = asyncio.create_task(self._apply_loop(call, latest))
                reader_task = asyncio.create_task(self._read_loop(call, latest))
                report_task = self._start_reports(call)
                try:
                    # Whichever ends first ends the stream: an apply loop that died is
                    # noticed at once (the stream is started again and the control plane
                    # resends what the Hello does not claim), not at the next message.
                    await asyncio.wait(
                        {applier_task, reader_task}, return_when=asyncio.FIRST_COMPLETED
                    )
                    answered = answered or self._answered
                    if applier_task.done():
                        applier_task.result()  # raises what ended it
                        raise RuntimeError("apply loop ended")
                    reader_task.result()
                finally:
                    answered = answered or self._answered
                    tasks = [applier_task, reader_task]
                    if report_task is not None:
                        tasks.append(report_task)
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    # A task keeps how it ended (the reader's UNAVAILABLE at the control
                    # plane's maximum connection age, with a traceback through this frame):
                    # held here too, they make a cycle with it, and the heap's settle froze
                    # the stream's objects long ago, so no collection would free it, nor
                    # the apply loop's last snapshot (the next stream's base) with every
                    # part later changes replace (docs/findings.md, "Agent memory: the lost
                    # stream's frames").
                    del tasks, task, applier_task, reader_task, report_task
            except grpc.aio.AioRpcError as e:
                if e.code() in REFUSED:
                    log.error(
                        "control plane %s refused this agent: %s %s (check the token file %s "
                        "and that the Hello names this pod)",
                        self.target,
                        e.code().name,
                        e.details(),
                        self.transport.token_file or "(none sent)",
                    )
                if not answered:
                    raise StreamBroken(f"{e.code().name}: {e.details()}") from e
                log.warning("stream lost: %s %s", e.code().name, e.details())
            except Exception as e:  # a write on a finished call, an applier bug: reconnect
                if not answered:
                    raise StreamBroken(repr(e)) from e
                log.exception("stream aborted (reconnecting): %r", e)
            finally:
                self.connected.clear()
                self.metrics.connected.set(0)
                call.cancel()
            if not answered:
                raise StreamBroken("stream ended before any answer")

    def _open(self) -> pb.AgentMessage:
        """The stream's Hello, and its protocol state from what is applied. The applied
        snapshot is read before the Hello (an apply may still finish) and not kept past
        this call: the state alone holds the delta base and lets it go at the next
        version, so what later changes replace is freed while the stream lives."""
        held = self.applier.applied_held
        hello = self.hello()
        self._state = protocol.opened(held, hello.hello.applied_content_hash)
        return hello

    def _start_reports(
        self, call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage]
    ) -> asyncio.Task[None] | None:
        """The stream's report task, apart from the apply loop and the reader: it never
        ends the stream (a failed write ends it quietly; the reader sees the stream go)."""
        if self.reporter is None:
            return None
        reporter = self.reporter
        self._applied = asyncio.Event()  # bound to this stream's event loop
        self._reports = stream = ReportStream(reporter)

        async def send(msg: pb.AgentMessage) -> None:
            await self._write(call, msg)

        async def run() -> None:
            try:
                await report_loop(reporter, send, self._applied, lambda: self.last_apply, stream)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("reports stopped on this stream: %r", e)

        return asyncio.create_task(run())

    async def _read_loop(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        latest: asyncio.Queue[protocol.Apply],
    ) -> None:
        """Read server messages until the stream ends; the first one marks it answered."""
        while True:
            msg = await call.read()
            if msg is grpc.aio.EOF:  # type: ignore[attr-defined]
                log.warning("control plane closed the stream")
                return
            assert isinstance(msg, pb.ServerMessage)
            if not self._answered:
                self._answered = True
                self.connected.set()
                self.metrics.connected.set(1)
            await self._handle(call, msg, latest)

    async def _handle(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        msg: pb.ServerMessage,
        latest: asyncio.Queue[protocol.Apply],
    ) -> None:
        """Log what came, let the protocol decide, then do what it decided."""
        if msg.HasField("report_terms"):
            self._report_terms(msg.report_terms)
        which = msg.WhichOneof("message")
        if which is None and msg.HasField("report_terms"):
            return  # ReportTerms alone: nothing else to do
        if which == "snapshot":
            events.snapshot_received(msg.nonce, msg.snapshot)
        elif which == "delta":
            events.delta_received(self.metrics, msg.nonce, msg.delta)
        self._state, decision = protocol.on_message(self._state, msg)
        if isinstance(decision, protocol.Note):
            events.noted(decision, msg)
            return
        events.coalesce(latest, decision)
        if isinstance(decision, protocol.Refuse):
            if decision.resync:
                events.resync_asked(self.metrics, decision.reason, msg)
            await self._write(call, self._sent(decision.answer))

    def _report_terms(self, terms: pb.ReportTerms) -> None:
        """The control plane merges partial reports: the next report is full (sent at
        once when reports went before the terms), partial ones may follow."""
        stream = self._reports
        if stream is None or not self.partial_reports:
            return  # not announced: a control plane sending them anyway is not followed
        if stream.take_terms(terms):
            self._applied.set()  # wakes the report task: a full report now
        log.debug("control plane takes partial reports (max_tables=%d)", terms.max_tables)

    async def _write(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        msg: pb.AgentMessage,
    ) -> None:
        async with self._write_lock:
            await call.write(msg)

    async def _apply_loop(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        latest: asyncio.Queue[protocol.Apply],
    ) -> None:
        while True:
            nonce, snap, change = _unpack(await latest.get())
            delay, attempt = self.retry_initial, 1
            while True:
                result = await self._apply(snap, change)
                if result.ok:
                    self.last_apply = LastApply(result.applied_by, rfc3339(datetime.now(UTC)))
                    self._applied.set()
                step = protocol.after_apply(result, attempt)
                if step.send:
                    await self._write(call, self._answer(nonce, snap, result, attempt))
                if result.ok and self.heap is not None:  # after the answer: it delays no ACK
                    self.heap.settle(rebuilt=change is None)
                if not step.retry:
                    break
                log.warning(
                    "retrying workload=%s version=%d nonce=%s in %.1fs (attempt %d failed: %s)",
                    snap.workload,
                    snap.version,
                    nonce,
                    delay,
                    attempt,
                    result.error,
                    extra=fields(event="apply_retry", workload=snap.workload, version=snap.version),
                )
                try:  # a newer snapshot replaces the one being retried
                    nonce, snap, change = _unpack(await asyncio.wait_for(latest.get(), delay))
                    delay, attempt = self.retry_initial, 1
                except TimeoutError:
                    delay, attempt = protocol.next_retry(delay, attempt, self.backoff_max)

    async def _apply(self, snap: Held, change: ChangeSet | None) -> Result:
        """The applier's result; an exception from it (the production applier turns its
        own into results) is a retryable NACK too, so the apply loop never dies of one."""
        try:
            return await asyncio.to_thread(self.applier.apply, snap, change)
        except Exception as e:
            log.exception("applier raised on version %d", snap.version)
            return Result(False, error=f"unexpected error: {e!r}", retryable=True)

    def _answer(self, nonce: str, snap: Held, result: Result, attempt: int) -> pb.AgentMessage:
        """The ACK or NACK for one apply, logged and counted."""
        return self._sent(protocol.answer(nonce, snap, result, attempt))

    def _sent(self, answer: protocol.Answer) -> pb.AgentMessage:
        """The one place an ACK or NACK is logged and counted, whoever decided it."""
        return events.sent(self.metrics, answer)


def _unpack(item: protocol.Apply) -> tuple[str, Held, ChangeSet | None]:
    return item.nonce, item.held, item.change
