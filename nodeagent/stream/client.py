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
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
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
from nodeagent.held import ChangeSet, DeltaError, Held, describe
from nodeagent.logformat import fields
from nodeagent.metrics import AgentMetrics
from nodeagent.stream.transport import TokenError, Transport
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc

log = logging.getLogger(__name__)

KEEPALIVE_MS = 30_000  # the server permits pings every >= 20 s
# gRPC's default 4 MiB refused the full snapshot of ~4,000 Services and more; the control
# plane sends up to 64 MiB (`--max-send-message-bytes`).
MAX_RECEIVE_BYTES = 64 * 1024 * 1024
REFUSED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


@dataclass(frozen=True)
class Identity:
    pod_namespace: str
    pod_name: str
    node_name: str = ""


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


Pending = tuple[str, Held, ChangeSet | None]  # nonce, full snapshot, what changed (deltas)


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
    ) -> None:
        self.deltas = deltas  # announce delta support (`nodeagent run --no-deltas`: not)
        self._base: Held | None = None  # the last content sent on this stream, in parts
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

    def hello(self) -> pb.AgentMessage:
        return pb.AgentMessage(
            hello=pb.Hello(
                pod_namespace=self.identity.pod_namespace,
                pod_name=self.identity.pod_name,
                node_name=self.identity.node_name,
                applied_content_hash=self.applier.applied_hash,
                applied_version=self.applier.applied_version,
                agent_version=__version__,
                accepts_deltas=self.deltas,
            )
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
                    await self._session()
            # The session was up and ended: start over with a fresh, short backoff.
            await asyncio.sleep(self.backoff_multiplier)

    async def _session(self) -> None:
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
            self._write_lock = asyncio.Lock()  # bound to this session's event loop
            try:
                held = self.applier.applied_held  # read first: an apply may still finish
                hello = self.hello()
                reported = hello.hello.applied_content_hash
                self._base = held if held is not None and held.content_hash == reported else None
                await call.write(hello)
                log.info(
                    "connected to %s as %s/%s (applied version=%d hash=%.12s)",
                    self.target,
                    self.identity.pod_namespace,
                    self.identity.pod_name,
                    self.applier.applied_version,
                    self.applier.applied_hash,
                )
                latest: asyncio.Queue[Pending] = asyncio.Queue(maxsize=1)
                self._answered = False
                applier_task = asyncio.create_task(self._apply_loop(call, latest))
                reader_task = asyncio.create_task(self._read_loop(call, latest))
                try:
                    # Whichever ends first ends the session: an apply loop that died is
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
                    for task in (applier_task, reader_task):
                        task.cancel()
                    await asyncio.gather(applier_task, reader_task, return_exceptions=True)
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

    async def _read_loop(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        latest: asyncio.Queue[Pending],
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
        latest: asyncio.Queue[Pending],
    ) -> None:
        which = msg.WhichOneof("message")
        if which == "snapshot":
            snap = msg.snapshot
            log.info(
                "snapshot received workload=%s version=%d hash=%.12s nonce=%s",
                snap.workload,
                snap.version,
                snap.content_hash,
                msg.nonce,
                extra=fields(
                    event="snapshot", workload=snap.workload, version=snap.version, nonce=msg.nonce
                ),
            )
            try:
                held = Held.from_snapshot(snap)
            except DeltaError as e:  # what the applier would say: a final NACK
                self._base = None
                _drop(latest)
                await self._write(
                    call,
                    self._nack(
                        msg.nonce, snap.version, snap.content_hash, f"render: {e}", snap.workload
                    ),
                )
                return
            self._base = held
            _offer(latest, (msg.nonce, held, None))
        elif which == "delta":
            await self._materialize(call, msg.nonce, msg.delta, latest)
        elif which == "in_sync":
            log.info(
                "in sync at version=%d hash=%.12s",
                msg.in_sync.version,
                msg.in_sync.content_hash,
                extra=fields(event="in_sync", version=msg.in_sync.version),
            )
        elif which == "waiting":
            log.info("control plane says wait: %s", msg.waiting.reason)
        else:
            log.warning("ignoring unknown server message %s", which)

    async def _materialize(
        self,
        call: grpc.aio.StreamStreamCall[pb.AgentMessage, pb.ServerMessage],
        nonce: str,
        delta: pb.SnapshotDelta,
        latest: asyncio.Queue[Pending],
    ) -> None:
        """Turn a delta into the full snapshot it leads to, at once (the next delta applies
        to it whatever becomes of this one), or NACK it with resync and hold nothing until
        the full snapshot the server sends next."""
        self.metrics.deltas.inc()
        log.info(
            "delta received workload=%s version=%d from=%.12s to=%.12s nonce=%s "
            "(%d backend(s), %d removed)",
            delta.workload,
            delta.version,
            delta.from_content_hash,
            delta.to_content_hash,
            nonce,
            len(delta.backends),
            len(delta.removed_backends),
            extra=fields(
                event="delta", workload=delta.workload, version=delta.version, nonce=nonce
            ),
        )
        try:
            if self._base is None:
                raise DeltaError("this agent holds no snapshot on this stream")
            held, change = self._base.apply(delta)
        except DeltaError as e:
            self._base = None
            _drop(latest)  # superseded: the server sends the full snapshot next
            self.metrics.delta_resyncs.inc()
            error = describe(delta, str(e))
            log.warning(
                "delta not applied, asking for the full snapshot (resync): %s nonce=%s",
                error,
                nonce,
                extra=fields(event="delta_resync", workload=delta.workload, version=delta.version),
            )
            nack = self._nack(nonce, delta.version, delta.to_content_hash, error, delta.workload)
            nack.nack.resync = True
            await self._write(call, nack)
            return
        self._base = held
        _offer(latest, (nonce, held, change))

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
        latest: asyncio.Queue[Pending],
    ) -> None:
        while True:
            nonce, snap, change = await latest.get()
            delay, attempt = self.retry_initial, 1
            while True:
                result = await self._apply(snap, change)
                if attempt == 1 or result.ok:  # one NACK per nonce; the ACK may follow it
                    await self._write(call, self._answer(nonce, snap, result, attempt))
                if result.ok or not result.retryable:
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
                    nonce, snap, change = await asyncio.wait_for(latest.get(), delay)
                    delay, attempt = self.retry_initial, 1
                except TimeoutError:
                    delay, attempt = min(delay * 2, self.backoff_max), attempt + 1

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
        ident = f"workload={snap.workload} version={snap.version} nonce={nonce}"
        kind = result.kind.value if result.kind else None
        extra = fields(workload=snap.workload, version=snap.version, nonce=nonce, path=kind)
        if result.ok:
            self.metrics.acks.inc()
            retried = f", after {attempt} attempts" if attempt > 1 else ""
            log.info("ACK %s (%s%s)", ident, kind, retried, extra={"event": "ack", **extra})
            return pb.AgentMessage(
                ack=pb.Ack(nonce=nonce, version=snap.version, content_hash=snap.content_hash)
            )
        return self._nack(nonce, snap.version, snap.content_hash, result.error, snap.workload, kind)

    def _nack(
        self,
        nonce: str,
        version: int,
        content_hash: str,
        error: str,
        workload: str,
        path: str | None = None,
    ) -> pb.AgentMessage:
        """A NACK, logged and counted."""
        self.metrics.nacks.inc()
        log.warning(
            "NACK workload=%s version=%d nonce=%s: %s",
            workload,
            version,
            nonce,
            error,
            extra=fields(
                event="nack",
                error=error,
                workload=workload,
                version=version,
                nonce=nonce,
                path=path,
            ),
        )
        return pb.AgentMessage(
            nack=pb.Nack(nonce=nonce, version=version, content_hash=content_hash, error=error)
        )


def _drop(latest: asyncio.Queue[Pending]) -> None:
    """Forget the snapshot waiting to be applied: a newer message supersedes it."""
    if latest.full():
        nonce, dropped, _ = latest.get_nowait()
        log.info("superseded: version %d (nonce %s) will not be applied", dropped.version, nonce)


def _offer(latest: asyncio.Queue[Pending], item: Pending) -> None:
    """Queue a full snapshot for the apply loop, replacing one still waiting (coalescing)."""
    if latest.full():
        _, dropped, _ = latest.get_nowait()
        log.info("coalesced: version %d superseded by %d", dropped.version, item[1].version)
    latest.put_nowait(item)
