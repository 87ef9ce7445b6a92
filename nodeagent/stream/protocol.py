"""The agent's side of the stream as pure decisions (docs/design.md, "The agent stream").

What the agent does with each server message and what it sends back, without gRPC,
logging, metrics, clocks or queues: `client.py` applies every decision (writes, logs,
counts, queues, sleeps), so every rule here is tested by tables (tests/agent/
test_stream_protocol.py). The rules:

- The Hello says what the applier runs (hash, version), which HAProxy it drives and
  whether deltas are accepted; an ACK says how HAProxy took the snapshot (`applied_by`)
  and the parts it runs without (`set_aside`).
- A stream's delta base is the last content the server sent on it, else what the Hello
  reported, when the applier still holds it in parts (`opened`).
- A Snapshot is held as sent and handed to the apply loop; one that cannot be held (a
  duplicate backend) is a final NACK at once, and the stream then holds nothing.
- A SnapshotDelta is applied to the base at once, in the reader, so the apply loop only
  ever sees full, hash-verified snapshots; one that does not apply (no base, another
  base, a hash mismatch, malformed) is NACKed at once with `resync`, and nothing is held
  until the full snapshot the server sends next.
- Coalescing (`coalesce`): a snapshot handed to the apply loop replaces one still waiting
  there (an answer to a superseded nonce would be stale); a NACK sent from the reader
  supersedes the waiting one too (the server sends what replaces it).
- InSync and Waiting are only noted; an unknown message is ignored. ReportTerms (with
  any message, or alone) are the report task's (`client.py`, `nodeagent/report.py`).
- Every ACK and NACK echoes the nonce of the message it answers, with that snapshot's
  version and content hash.
- One NACK per nonce: a retryable failure is applied again with backoff (doubling, up to
  a cap) and answered again only when it succeeds (an ACK of the same nonce), unless a
  newer snapshot replaces it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from nodeagent.apply.outcome import Result, SetAside
from nodeagent.held import ChangeSet, DeltaError, Held, describe
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb


@dataclass(frozen=True)
class Identity:
    """Who the agent is, as its Hello says it."""

    pod_namespace: str
    pod_name: str
    node_name: str = ""
    haproxy_version: str = ""  # "3.0.11"; "" when `haproxy -v` could not say


def hello(
    identity: Identity,
    applied_hash: str,
    applied_version: int,
    agent_version: str,
    deltas: bool,
    partial_reports: bool = False,
) -> pb.AgentMessage:
    """The first message of every stream; `partial_reports`: the agent reports and can
    send partial reports under the control plane's ReportTerms."""
    return pb.AgentMessage(
        hello=pb.Hello(
            contract=CONTRACT,
            pod_namespace=identity.pod_namespace,
            pod_name=identity.pod_name,
            node_name=identity.node_name,
            applied_content_hash=applied_hash,
            applied_version=applied_version,
            agent_version=agent_version,
            accepts_deltas=deltas,
            haproxy_version=identity.haproxy_version,
            partial_reports=partial_reports,
        )
    )


@dataclass(frozen=True)
class StreamState:
    """What the agent knows on one stream; replaced, never mutated."""

    # The last content the server sent on this stream (else what the Hello reported), in
    # parts: the base the next delta applies to. None: a delta now is a resync.
    base: Held | None = None


def opened(applied: Held | None, reported_hash: str) -> StreamState:
    """A new stream: `applied` (the applier's snapshot in parts, read before the Hello was
    built) is the delta base only when it is what the Hello reported; an apply that
    finished in between leaves no base rather than a wrong one."""
    if applied is not None and applied.content_hash == reported_hash:
        return StreamState(base=applied)
    return StreamState()


# ---------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Answer:
    """An ACK or NACK to send, with what its log line names beside the message."""

    message: pb.AgentMessage
    workload: str
    path: str | None = None  # the apply path (nothing, runtime, reload), when one ran
    attempts: int = 1  # apply attempts it took (an ACK after retries says so)

    @property
    def ok(self) -> bool:
        return self.message.HasField("ack")


# Parts an ACK names at most (each under 0.8 KB): the ACK stays far below the control
# plane's 1 MiB receive limit; `set_aside_count`, the log and the metric count them all.
MAX_SET_ASIDE_SENT = 256


def ack(
    nonce: str,
    snapshot: Held,
    path: str | None = None,
    attempts: int = 1,
    applied_by: str = "",
    set_aside: Sequence[SetAside] = (),
) -> Answer:
    """`applied_by` (runtime, reload, nothing, start) tells the control plane how HAProxy
    took it, `set_aside` what it runs without."""
    return Answer(
        pb.AgentMessage(
            ack=pb.Ack(
                nonce=nonce,
                version=snapshot.version,
                content_hash=snapshot.content_hash,
                applied_by=applied_by,
                set_aside=[
                    pb.SetAsidePart(
                        kind=p.kind, name=p.name, fingerprint=p.fingerprint, reason=p.reason
                    )
                    for p in set_aside[:MAX_SET_ASIDE_SENT]
                ],
                set_aside_count=len(set_aside),
            )
        ),
        snapshot.workload,
        path,
        attempts,
    )


def nack(
    nonce: str,
    version: int,
    content_hash: str,
    error: str,
    workload: str,
    path: str | None = None,
    resync: bool = False,
) -> Answer:
    """Every NACK the agent sends is built here: an apply that failed, a snapshot that
    cannot be held, a delta that does not apply (`resync`)."""
    return Answer(
        pb.AgentMessage(
            nack=pb.Nack(
                nonce=nonce,
                version=version,
                content_hash=content_hash,
                error=error,
                resync=resync,
            )
        ),
        workload,
        path,
    )


def answer(nonce: str, snapshot: Held, result: Result, attempt: int) -> Answer:
    """The ACK or NACK for one apply of `snapshot` (sent under `nonce`)."""
    path = result.kind.value if result.kind else None
    if result.ok:
        return ack(nonce, snapshot, path, attempt, result.applied_by, result.set_aside)
    return nack(
        nonce, snapshot.version, snapshot.content_hash, result.error, snapshot.workload, path
    )


# ---------------------------------------------------------------------- downstream


@dataclass(frozen=True)
class Apply:
    """Hand this full snapshot to the apply loop, replacing one still waiting there."""

    nonce: str
    held: Held
    change: ChangeSet | None = None  # what the delta changed; None for a full snapshot


@dataclass(frozen=True)
class Refuse:
    """Answer at once with this NACK; the snapshot waiting to be applied is superseded."""

    answer: Answer
    reason: str  # why, for the log

    @property
    def resync(self) -> bool:
        """A delta that did not apply: the server sends the full snapshot next."""
        return self.answer.message.nack.resync


@dataclass(frozen=True)
class Note:
    """Nothing to apply or send: `in_sync`, `waiting`, or an unknown message."""

    kind: str


Decision = Apply | Refuse | Note


def on_message(state: StreamState, msg: pb.ServerMessage) -> tuple[StreamState, Decision]:
    """The next state and what to do with one server message."""
    which = msg.WhichOneof("message")
    if which == "snapshot":
        return _on_snapshot(state, msg.nonce, msg.snapshot)
    if which == "delta":
        return _on_delta(state, msg.nonce, msg.delta)
    if which in ("in_sync", "waiting"):
        return state, Note(which)
    return state, Note(which or "")


def _on_snapshot(state: StreamState, nonce: str, snap: pb.Snapshot) -> tuple[StreamState, Decision]:
    try:
        held = Held.from_snapshot(snap)
    except DeltaError as e:  # what the applier would say: a final NACK
        error = f"render: {e}"
        refused = nack(nonce, snap.version, snap.content_hash, error, snap.workload)
        return StreamState(), Refuse(refused, error)
    return StreamState(base=held), Apply(nonce, held)


def _on_delta(
    state: StreamState, nonce: str, delta: pb.SnapshotDelta
) -> tuple[StreamState, Decision]:
    try:
        if state.base is None:
            raise DeltaError("this agent holds no snapshot on this stream")
        held, change = state.base.apply(delta)
    except DeltaError as e:
        error = describe(delta, str(e))
        refused = nack(
            nonce, delta.version, delta.to_content_hash, error, delta.workload, resync=True
        )
        return StreamState(), Refuse(refused, error)
    return StreamState(base=held), Apply(nonce, held, change)


# ---------------------------------------------------------------------- the apply loop


@dataclass(frozen=True)
class AfterApply:
    """What follows one apply attempt."""

    send: bool  # send this attempt's answer (the first one, or the ACK that ends retries)
    retry: bool  # apply the same snapshot again after a delay, unless a newer one comes


def after_apply(result: Result, attempt: int) -> AfterApply:
    """One NACK per nonce; a retryable failure is retried, and its success ACKed."""
    return AfterApply(send=attempt == 1 or result.ok, retry=not result.ok and result.retryable)


def next_retry(delay: float, attempt: int, cap: float) -> tuple[float, int]:
    """The wait before the attempt after `attempt`: doubled, at most `cap`."""
    return min(delay * 2, cap), attempt + 1


def coalesce(waiting: Apply | None, decision: Decision) -> tuple[Apply | None, Apply | None]:
    """The apply loop's single slot after `decision`: (what waits in it now, what was
    waiting and will not be applied). A snapshot replaces the one waiting (only the newest
    is applied: an answer to an older nonce would be stale), a NACK sent at once empties
    the slot (the server sends what replaces it), a note leaves it as it is."""
    if isinstance(decision, Apply):
        return decision, waiting
    if isinstance(decision, Refuse):
        return None, waiting
    return waiting, None
