"""The agent stream's protocol as a pure state machine (docs/design.md, "The agent stream").

A stream's state is a frozen `StreamState`; every step takes the state and an input (what
the store holds for the agent now, or an Ack/Nack it sent) and returns the next state
and a decision. Nothing here reads a clock, logs, counts or touches gRPC: `stream.py`
applies the decisions (writes, logs, metrics), so every transition is tested by tables.

Downstream, per wake-up: `resolve` finds the agent's target, `next_message` decides
Snapshot | Delta | InSync | Waiting | nothing. Rules (xDS):
- the same content is never sent twice in a row (pending, acked or nacked), except the
  full snapshot a resync Nack asks for;
- an agent that accepts deltas gets a delta from the content it holds (the last content
  sent on this stream, else the one its Hello reported) when the store retains that
  base, else the full snapshot;
- an agent that reconnects with the content it runs hears InSync, not the snapshot, also
  after a Waiting;
- only the latest version is ever pending, each with a fresh nonce.
Upstream: `on_ack` / `on_nack` accept only the last nonce sent; an Ack of the last
NACKed nonce still counts while nothing newer was sent (the agent's retry succeeded); a
Nack with `resync` of a delta owes the agent the full snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from peerplane.runtime.untrusted import redact_pem

MAX_NACK_ERROR_CHARS = 4096  # NACK text kept for ListAgents and logged


@dataclass(frozen=True, slots=True)
class Sent:
    """A snapshot sent on a stream and not yet answered."""

    nonce: str
    version: int
    content_hash: str
    since: float = 0.0  # monotonic: publication, or the stream's start if later
    base: str = ""  # a delta's from_content_hash; "" for a full snapshot


@dataclass(frozen=True, slots=True)
class StreamState:
    """What the protocol knows about one stream; replaced, never mutated."""

    workload: str = ""
    acked_version: int = 0
    acked_hash: str = ""
    # Hash of the last snapshot sent (or confirmed with InSync): never sent twice in a row.
    sent_hash: str = ""
    nonces: int = 0  # nonces issued on this stream; the last one is str(nonces)
    pending: Sent | None = None
    # The last Nacked snapshot: the agent may retry it and Ack the same nonce later (a
    # reload that failed on a port still held), as long as nothing newer was sent.
    nacked: Sent | None = None
    last_nack_error: str = ""
    last_nack_version: int = 0
    waiting_reason: str = ""  # last Waiting reason sent; "" when serving
    answered: bool = False  # the Hello got its answer
    ignored_messages: int = 0  # stale Acks/Nacks, extra Hellos
    opened_at: float = 0.0  # monotonic start of the stream (push-latency floor)
    deltas: bool = False  # the agent accepts deltas and the server sends them
    resync: bool = False  # a delta was Nacked with resync: the full snapshot is owed

    @property
    def held_hash(self) -> str:
        """The content the agent holds, base of the next delta: the last content sent
        (or confirmed with InSync), else what the Hello reported; "" when unknown."""
        return self.sent_hash or self.acked_hash

    @property
    def last_nonce(self) -> str:
        """The only nonce an Ack or Nack may carry ("" before the first snapshot)."""
        return str(self.nonces) if self.nonces else ""


def initial_state(
    applied_hash: str, applied_version: int, opened_at: float, deltas: bool = False
) -> StreamState:
    """A fresh stream, seeded only with what the agent's Hello reports it runs; `deltas`
    when the agent accepts deltas and the server sends them."""
    return StreamState(
        acked_version=applied_version if applied_hash else 0,
        acked_hash=applied_hash,
        opened_at=opened_at,
        deltas=deltas,
    )


# ---------------------------------------------------------------------- downstream


class PublishedVersion(Protocol):
    """One published version of a workload (the store's `Published`), as read here."""

    @property
    def workload(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def content_hash(self) -> str: ...

    @property
    def published_at(self) -> float: ...  # monotonic

    @property
    def message_bytes(self) -> bytes: ...  # ServerMessage(snapshot=...), shared

    @property
    def bases(self) -> frozenset[str]: ...  # content hashes a delta to it can start from


class StoreView(Protocol):
    """The read side of `SnapshotStore` that resolution needs."""

    @property
    def has_published(self) -> bool: ...

    def workload_of(self, pod: str) -> str | None: ...

    def get(self, workload: str) -> PublishedVersion | None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """The version an agent should run now, or why it cannot be served yet."""

    workload: str  # "" when the pod belongs to no workload
    published: PublishedVersion | None
    reason: str = ""  # set when `published` is None


def resolve(store: StoreView, pod: str, workload: str) -> Target:
    """The target of agent `pod`, whose stream last served `workload` ("" if none)."""
    mapped = store.workload_of(pod)
    if mapped is None and workload and store.get(workload):
        # A pod leaving the mapping (being deleted) keeps its workload while it drains.
        mapped = workload
    if mapped is None:
        if not store.has_published:
            return Target("", None, "no snapshot computed yet")
        return Target("", None, f"pod {pod} is not a known HAProxy pod")
    published = store.get(mapped)
    if published is None:
        return Target(mapped, None, f"workload {mapped} has no snapshot")
    return Target(mapped, published)


@dataclass(frozen=True, slots=True)
class SendWaiting:
    reason: str


@dataclass(frozen=True, slots=True)
class SendInSync:
    published: PublishedVersion


@dataclass(frozen=True, slots=True)
class SendSnapshot:
    sent: Sent  # what is now pending (nonce, version, hash)
    published: PublishedVersion
    resync: bool = False  # paid a resync Nack


@dataclass(frozen=True, slots=True)
class SendDelta:
    sent: Sent  # what is now pending; `sent.base` is the delta's from_content_hash
    published: PublishedVersion


Down = SendWaiting | SendInSync | SendSnapshot | SendDelta | None


def next_message(state: StreamState, target: Target) -> tuple[StreamState, Down]:
    """What to send now (None: the agent has, or was sent, the latest) and the new state."""
    if target.workload and target.workload != state.workload:  # replaced only if changed
        state = replace(state, workload=target.workload)
    published = target.published
    if published is None:
        if target.reason == state.waiting_reason and state.answered:
            return state, None
        return replace(state, answered=True, waiting_reason=target.reason), SendWaiting(
            target.reason
        )
    was_waiting = bool(state.waiting_reason)
    if was_waiting:
        state = replace(state, waiting_reason="")
    content_hash = published.content_hash
    resync = state.resync
    if not resync:
        # After a Waiting, an agent that runs the content still needs its InSync.
        if (not state.answered or was_waiting) and content_hash == state.acked_hash:
            state = replace(
                state, answered=True, sent_hash=content_hash, acked_version=published.version
            )
            return state, SendInSync(published)
        if state.answered:
            if content_hash == state.sent_hash:
                return state, None  # sent already (pending, acked or nacked): never twice
            if state.pending is None and content_hash == state.acked_hash:
                return state, None  # the agent runs it (after a Nack, content went back)
    nonces = state.nonces + 1
    since = max(published.published_at, state.opened_at)
    base = state.held_hash
    if resync or not state.deltas or base == content_hash or base not in published.bases:
        base = ""  # the full snapshot: owed, not wanted, or no retained base
    sent = Sent(str(nonces), published.version, content_hash, since, base)
    state = replace(
        state, answered=True, nonces=nonces, sent_hash=content_hash, pending=sent, resync=False
    )
    if base:
        return state, SendDelta(sent, published)
    return state, SendSnapshot(sent, published, resync)


# ---------------------------------------------------------------------- upstream


@dataclass(frozen=True, slots=True)
class Acked:
    sent: Sent


@dataclass(frozen=True, slots=True)
class Nacked:
    sent: Sent
    error: str  # stripped, at most MAX_NACK_ERROR_CHARS
    resync: bool = False  # a delta the agent could not build: the full snapshot is owed


@dataclass(frozen=True, slots=True)
class Stale:
    """An Ack/Nack that answers nothing pending on this stream: counted and ignored."""

    what: str  # "Ack" or "Nack"
    nonce: str  # as received (untrusted: escape before logging)


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message other than Ack/Nack after the Hello (a second Hello, say)."""

    kind: str


def _answered(state: StreamState, nonce: str, what: str) -> Sent | None:
    """The snapshot this Ack/Nack answers, or None when it is stale."""
    pending = state.pending
    if pending is None and what == "Ack":
        pending = state.nacked  # an Ack after a Nack: the agent's retry succeeded
    if pending is None or nonce != state.last_nonce or nonce != pending.nonce:
        return None
    return pending


def on_ack(state: StreamState, nonce: str) -> tuple[StreamState, Acked | Stale]:
    sent = _answered(state, nonce, "Ack")
    if sent is None:
        return replace(state, ignored_messages=state.ignored_messages + 1), Stale("Ack", nonce)
    state = replace(
        state,
        pending=None,
        nacked=None,
        acked_version=sent.version,
        acked_hash=sent.content_hash,
        last_nack_error="",
        last_nack_version=0,
    )
    return state, Acked(sent)


def on_nack(
    state: StreamState, nonce: str, error: str, resync: bool = False
) -> tuple[StreamState, Nacked | Stale]:
    """A Nack of the last nonce sent. `resync` counts only for a delta: a full snapshot
    Nacked with it is an ordinary Nack (resending it would loop)."""
    sent = _answered(state, nonce, "Nack")
    if sent is None:
        return replace(state, ignored_messages=state.ignored_messages + 1), Stale("Nack", nonce)
    kept = redact_pem(error.strip()[:MAX_NACK_ERROR_CHARS])  # shown by ListAgents, logged
    owed = resync and bool(sent.base)
    state = replace(
        state,
        pending=None,
        nacked=sent,
        last_nack_error=kept,
        last_nack_version=sent.version,
        resync=state.resync or owed,
    )
    return state, Nacked(sent, kept, owed)


def on_other(state: StreamState, kind: str) -> tuple[StreamState, Ignored]:
    return replace(state, ignored_messages=state.ignored_messages + 1), Ignored(kind)
