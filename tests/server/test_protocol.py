"""The stream protocol's transitions, by table (docs/design.md, "The agent stream").

Every row is one step of the pure state machine in `controlplane/server/protocol.py`:
a state, an input, and the exact decision and next state. No gRPC here; the same rules
over real streams are in server/test_stream.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.server import protocol
from controlplane.server.protocol import (
    Acked,
    Ignored,
    Nacked,
    SendInSync,
    SendSnapshot,
    SendWaiting,
    Sent,
    Stale,
    StreamState,
    Target,
    initial_state,
)

pytestmark = pytest.mark.unit  # pure: `-m unit` selects it although the folder is integration

W = "haproxy-system/DaemonSet/haproxy"
POD = "haproxy-system/haproxy-a"


@dataclass(frozen=True, slots=True)
class V:
    """A published version as the protocol reads it (the store's `Published`)."""

    workload: str
    version: int
    content_hash: str
    published_at: float = 0.0
    message_bytes: bytes = b""
    bases: frozenset[str] = frozenset()  # retained contents a delta can start from


A1 = V(W, 1, "hash-a", published_at=10.0)
B2 = V(W, 2, "hash-b", published_at=20.0, bases=frozenset({"hash-a"}))
C3 = V(W, 3, "hash-c", published_at=30.0, bases=frozenset({"hash-a", "hash-b"}))
# Content A published again as a new version.
A4 = V(W, 4, "hash-a", published_at=40.0, bases=frozenset({"hash-b", "hash-c"}))


def serve(version: V) -> Target:
    return Target(W, version)


NOT_YET = Target("", None, "no snapshot computed yet")
UNKNOWN = Target("", None, f"pod {POD} is not a known HAProxy pod")

FRESH = StreamState(opened_at=5.0)
RUNS_A = initial_state("hash-a", 7, 5.0)  # reconnected with the content of A applied
SENT_A = Sent("1", 1, "hash-a", 10.0)
SENT_B = Sent("2", 2, "hash-b", 20.0)
SENT_C = Sent("3", 3, "hash-c", 30.0)
# A was sent and is pending.
PENDING_A = replace(FRESH, workload=W, answered=True, nonces=1, sent_hash="hash-a", pending=SENT_A)
# A was sent and acked.
ACKED_A = replace(PENDING_A, pending=None, acked_version=1, acked_hash="hash-a", waiting_reason="")
# A acked, then B sent and pending.
PENDING_B = replace(ACKED_A, nonces=2, sent_hash="hash-b", pending=SENT_B)
# A acked, B nacked.
NACKED_B = replace(
    PENDING_B, pending=None, nacked=SENT_B, last_nack_error="bad", last_nack_version=2
)
# A acked, B nacked, then C sent and pending.
PENDING_C_AFTER_NACK = replace(NACKED_B, nonces=3, sent_hash="hash-c", pending=SENT_C)
WAITING = replace(FRESH, answered=True, waiting_reason="no snapshot computed yet")
RUNS_A_WAITING = replace(RUNS_A, answered=True, waiting_reason="no snapshot computed yet")


DOWN = [
    # id, state, target, decision, next state
    (
        "fresh, nothing computed: Waiting",
        FRESH,
        NOT_YET,
        SendWaiting("no snapshot computed yet"),
        WAITING,
    ),
    ("waiting, same reason: nothing", WAITING, NOT_YET, None, WAITING),
    (
        "waiting, new reason: Waiting again",
        WAITING,
        UNKNOWN,
        SendWaiting(UNKNOWN.reason),
        replace(WAITING, waiting_reason=UNKNOWN.reason),
    ),
    (
        "fresh, target A: Snapshot with nonce 1, pending since publication",
        FRESH,
        serve(A1),
        SendSnapshot(SENT_A, A1),
        PENDING_A,
    ),
    (
        "stream opened after publication: latency counted from the stream's start",
        replace(FRESH, opened_at=15.0),
        serve(A1),
        SendSnapshot(Sent("1", 1, "hash-a", 15.0), A1),
        replace(PENDING_A, opened_at=15.0, pending=Sent("1", 1, "hash-a", 15.0)),
    ),
    (
        "reconnect with the current hash: InSync at the published version, no nonce",
        RUNS_A,
        serve(A1),
        SendInSync(A1),
        replace(RUNS_A, workload=W, answered=True, sent_hash="hash-a", acked_version=1),
    ),
    (
        "reconnect with an old hash: Snapshot",
        RUNS_A,
        serve(B2),
        SendSnapshot(Sent("1", 2, "hash-b", 20.0), B2),
        replace(
            RUNS_A,
            workload=W,
            answered=True,
            nonces=1,
            sent_hash="hash-b",
            pending=Sent("1", 2, "hash-b", 20.0),
        ),
    ),
    (
        "waiting, then the content the agent runs: InSync",
        RUNS_A_WAITING,
        serve(A1),
        SendInSync(A1),
        replace(RUNS_A, workload=W, answered=True, sent_hash="hash-a", acked_version=1),
    ),
    (
        "waiting, then another content: Snapshot, reason cleared",
        WAITING,
        serve(A1),
        SendSnapshot(SENT_A, A1),
        PENDING_A,
    ),
    ("A pending, target A: nothing", PENDING_A, serve(A1), None, PENDING_A),
    (
        "A pending, target B: Snapshot B supersedes A with a new nonce",
        PENDING_A,
        serve(B2),
        SendSnapshot(Sent("2", 2, "hash-b", 20.0), B2),
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=Sent("2", 2, "hash-b", 20.0)),
    ),
    ("A acked, target A: nothing", ACKED_A, serve(A1), None, ACKED_A),
    (
        "A acked, A republished as a new version: nothing (same content)",
        ACKED_A,
        serve(A4),
        None,
        ACKED_A,
    ),
    ("B nacked, target B: never sent twice in a row", NACKED_B, serve(B2), None, NACKED_B),
    (
        "B nacked, content went back to A (which the agent runs): nothing",
        NACKED_B,
        serve(A4),
        None,
        NACKED_B,
    ),
    (
        "B nacked, target C: Snapshot C",
        NACKED_B,
        serve(C3),
        SendSnapshot(SENT_C, C3),
        PENDING_C_AFTER_NACK,
    ),
    (
        "B pending, content went back to A: A is sent again (B may be half applied)",
        PENDING_B,
        serve(A4),
        SendSnapshot(Sent("3", 4, "hash-a", 40.0), A4),
        replace(PENDING_B, nonces=3, sent_hash="hash-a", pending=Sent("3", 4, "hash-a", 40.0)),
    ),
    (
        "mapped workload without a snapshot: Waiting, workload recorded",
        FRESH,
        Target(W, None, f"workload {W} has no snapshot"),
        SendWaiting(f"workload {W} has no snapshot"),
        replace(FRESH, workload=W, answered=True, waiting_reason=f"workload {W} has no snapshot"),
    ),
    (
        "A acked, pod no longer known: Waiting, workload kept",
        ACKED_A,
        UNKNOWN,
        SendWaiting(UNKNOWN.reason),
        replace(ACKED_A, waiting_reason=UNKNOWN.reason),
    ),
    (
        "A acked, waiting, A again: InSync (the agent must hear it is in sync)",
        replace(ACKED_A, waiting_reason=UNKNOWN.reason),
        serve(A1),
        SendInSync(A1),
        ACKED_A,
    ),
]


@pytest.mark.parametrize(
    ("state", "target", "decision", "after"),
    [row[1:] for row in DOWN],
    ids=[row[0] for row in DOWN],
)
def test_next_message(
    state: StreamState, target: Target, decision: protocol.Down, after: StreamState
) -> None:
    assert protocol.next_message(state, target) == (after, decision)


UP = [
    # id, state, (kind, nonce, error), outcome, next state
    (
        "Ack of the pending nonce",
        PENDING_A,
        ("ack", "1", ""),
        Acked(SENT_A),
        ACKED_A,
    ),
    (
        "Ack of a superseded nonce: stale",
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=SENT_B),
        ("ack", "1", ""),
        Stale("Ack", "1"),
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=SENT_B, ignored_messages=1),
    ),
    (
        "Ack with nothing sent: stale",
        FRESH,
        ("ack", "", ""),
        Stale("Ack", ""),
        replace(FRESH, ignored_messages=1),
    ),
    (
        "second Ack of an acked nonce: stale",
        ACKED_A,
        ("ack", "1", ""),
        Stale("Ack", "1"),
        replace(ACKED_A, ignored_messages=1),
    ),
    (
        "Nack of the pending nonce: acked version kept, error stripped",
        PENDING_B,
        ("nack", "2", "  bad\n"),
        Nacked(SENT_B, "bad"),
        NACKED_B,
    ),
    (
        "Nack error kept to MAX_NACK_ERROR_CHARS",
        PENDING_B,
        ("nack", "2", "x" * 10_000),
        Nacked(SENT_B, "x" * protocol.MAX_NACK_ERROR_CHARS),
        replace(NACKED_B, last_nack_error="x" * protocol.MAX_NACK_ERROR_CHARS),
    ),
    (
        "Ack after Nack of the same nonce: the retried apply counts",
        NACKED_B,
        ("ack", "2", ""),
        Acked(SENT_B),
        replace(
            NACKED_B,
            nacked=None,
            acked_version=2,
            acked_hash="hash-b",
            last_nack_error="",
            last_nack_version=0,
        ),
    ),
    (
        "Nack after Nack of the same nonce: stale",
        NACKED_B,
        ("nack", "2", "again"),
        Stale("Nack", "2"),
        replace(NACKED_B, ignored_messages=1),
    ),
    (
        "Ack of a nacked nonce after something newer was sent: stale",
        PENDING_C_AFTER_NACK,
        ("ack", "2", ""),
        Stale("Ack", "2"),
        replace(PENDING_C_AFTER_NACK, ignored_messages=1),
    ),
    (
        "Ack of the newer nonce after a Nack: acked, Nack cleared",
        PENDING_C_AFTER_NACK,
        ("ack", "3", ""),
        Acked(SENT_C),
        replace(
            PENDING_C_AFTER_NACK,
            pending=None,
            nacked=None,
            acked_version=3,
            acked_hash="hash-c",
            last_nack_error="",
            last_nack_version=0,
        ),
    ),
    (
        "Nack of a superseded nonce: stale",
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=SENT_B),
        ("nack", "1", "late"),
        Stale("Nack", "1"),
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=SENT_B, ignored_messages=1),
    ),
    (
        "a second Hello: ignored and counted",
        PENDING_A,
        ("hello", "", ""),
        Ignored("hello"),
        replace(PENDING_A, ignored_messages=1),
    ),
]


def step_up(state: StreamState, kind: str, nonce: str, error: str) -> tuple[StreamState, object]:
    if kind == "ack":
        return protocol.on_ack(state, nonce)
    if kind == "nack":
        return protocol.on_nack(state, nonce, error)
    return protocol.on_other(state, kind)


@pytest.mark.parametrize(
    ("state", "message", "outcome", "after"),
    [row[1:] for row in UP],
    ids=[row[0] for row in UP],
)
def test_upstream(
    state: StreamState, message: tuple[str, str, str], outcome: object, after: StreamState
) -> None:
    assert step_up(state, *message) == (after, outcome)


@dataclass
class Store:
    """The store's read side (`protocol.StoreView`): published versions and pod mapping."""

    versions: dict[str, V] = field(default_factory=dict)
    pods: dict[str, str] = field(default_factory=dict)
    has_published: bool = True

    def workload_of(self, pod: str) -> str | None:
        return self.pods.get(pod)

    def get(self, workload: str) -> V | None:
        return self.versions.get(workload)


RESOLVE = [
    # id, store, stream's last workload, target
    ("nothing computed yet", Store(has_published=False), "", NOT_YET),
    ("computed, pod unknown", Store({W: A1}), "", UNKNOWN),
    ("pod mapped to a published workload", Store({W: A1}, {POD: W}), "", Target(W, A1)),
    ("pod leaving the mapping keeps its workload while it drains", Store({W: A1}), W, serve(A1)),
    ("pod gone and its workload gone", Store(), W, UNKNOWN),
    (
        "pod mapped to a workload without a snapshot",
        Store({}, {POD: W}),
        "",
        Target(W, None, f"workload {W} has no snapshot"),
    ),
]


@pytest.mark.parametrize(
    ("store", "workload", "target"),
    [row[1:] for row in RESOLVE],
    ids=[row[0] for row in RESOLVE],
)
def test_resolve(store: Store, workload: str, target: Target) -> None:
    assert protocol.resolve(store, POD, workload) == target


def test_hello_seeds_the_acked_content_only_with_a_hash() -> None:
    assert initial_state("hash-a", 7, 1.0) == StreamState(
        acked_version=7, acked_hash="hash-a", opened_at=1.0
    )
    assert initial_state("", 7, 1.0) == StreamState(opened_at=1.0)


STEPS = st.lists(
    st.one_of(
        st.sampled_from([serve(A1), serve(B2), serve(C3), serve(A4), NOT_YET, UNKNOWN]),
        st.sampled_from(["ack", "nack", "ack-old"]),
    ),
    max_size=40,
)


@given(start=st.sampled_from([FRESH, RUNS_A]), steps=STEPS)
def test_any_sequence_keeps_the_stream_rules(start: StreamState, steps: list[object]) -> None:
    """Over any interleaving: nonces count up by one, only the last nonce is ever pending,
    no content is sent twice in a row, and an Ack only ever acknowledges sent content."""
    state = start
    last_sent = ""
    sent_hashes = {start.acked_hash} - {""}
    for step in steps:
        if isinstance(step, Target):
            before = state.nonces
            state, decision = protocol.next_message(state, step)
            if isinstance(decision, SendSnapshot):
                assert decision.sent.nonce == str(before + 1) == state.last_nonce
                assert decision.sent.content_hash != last_sent
                last_sent = decision.sent.content_hash
                sent_hashes.add(last_sent)
            else:
                assert state.nonces == before
            if isinstance(decision, SendInSync):
                last_sent = decision.published.content_hash
        else:
            nonce = state.last_nonce if step != "ack-old" else str(max(state.nonces - 1, 0))
            state, _ = step_up(state, "nack" if step == "nack" else "ack", nonce, "e")
        assert state.pending is None or state.pending.nonce == state.last_nonce
        assert state.acked_hash == "" or state.acked_hash in sent_hashes
