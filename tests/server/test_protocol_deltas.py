"""The stream protocol with deltas, by table (docs/design.md, "The agent stream").

Rows as in server/test_protocol.py: a state, an input, the exact decision and next
state. The delta's base is the content the agent holds: the last content sent on the
stream (acked, pending or nacked), else what its Hello reported; a resync Nack of a
delta owes the full snapshot, even of the content just sent.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.server import protocol
from controlplane.server.protocol import (
    Nacked,
    SendDelta,
    SendInSync,
    SendSnapshot,
    SendWaiting,
    Sent,
    Stale,
    StreamState,
    Target,
    initial_state,
)
from tests.server.test_protocol import A1, A4, B2, C3, NOT_YET, V, W, serve

pytestmark = pytest.mark.unit  # pure: `-m unit` selects it although the folder is integration

FRESH = StreamState(opened_at=5.0, deltas=True)
SENT_A = Sent("1", 1, "hash-a", 10.0)
DELTA_B = Sent("2", 2, "hash-b", 20.0, base="hash-a")
PENDING_A = replace(FRESH, workload=W, answered=True, nonces=1, sent_hash="hash-a", pending=SENT_A)
ACKED_A = replace(PENDING_A, pending=None, acked_version=1, acked_hash="hash-a")
NACKED_A = replace(
    PENDING_A, pending=None, nacked=SENT_A, last_nack_error="bad", last_nack_version=1
)
PENDING_DELTA_B = replace(ACKED_A, nonces=2, sent_hash="hash-b", pending=DELTA_B)
RESYNC_B = replace(
    PENDING_DELTA_B,
    pending=None,
    nacked=DELTA_B,
    last_nack_error="no base",
    last_nack_version=2,
    resync=True,
)
RUNS_A = initial_state("hash-a", 7, 5.0, deltas=True)
E5 = V(W, 5, "hash-e", published_at=50.0, bases=frozenset({"hash-c", "hash-d"}))


DOWN = [
    # id, state, target, decision, next state
    (
        "nothing held: the full snapshot first",
        FRESH,
        serve(A1),
        SendSnapshot(SENT_A, A1),
        PENDING_A,
    ),
    (
        "A acked, B published: delta from A",
        ACKED_A,
        serve(B2),
        SendDelta(DELTA_B, B2),
        PENDING_DELTA_B,
    ),
    (
        "A pending (not yet acked): the agent holds it, delta from A",
        PENDING_A,
        serve(B2),
        SendDelta(DELTA_B, B2),
        replace(PENDING_A, nonces=2, sent_hash="hash-b", pending=DELTA_B),
    ),
    (
        "A nacked: the agent still materialized it, delta from A",
        NACKED_A,
        serve(B2),
        SendDelta(DELTA_B, B2),
        replace(NACKED_A, nonces=2, sent_hash="hash-b", pending=DELTA_B),
    ),
    (
        "delta B pending, C published: delta from B (what was last sent)",
        PENDING_DELTA_B,
        serve(C3),
        SendDelta(Sent("3", 3, "hash-c", 30.0, base="hash-b"), C3),
        replace(
            PENDING_DELTA_B,
            nonces=3,
            sent_hash="hash-c",
            pending=Sent("3", 3, "hash-c", 30.0, base="hash-b"),
        ),
    ),
    (
        "reconnect with a retained hash: delta from the Hello's hash",
        RUNS_A,
        serve(B2),
        SendDelta(Sent("1", 2, "hash-b", 20.0, base="hash-a"), B2),
        replace(
            RUNS_A,
            workload=W,
            answered=True,
            nonces=1,
            sent_hash="hash-b",
            pending=Sent("1", 2, "hash-b", 20.0, base="hash-a"),
        ),
    ),
    (
        "reconnect with the current hash: InSync, no delta",
        RUNS_A,
        serve(A1),
        SendInSync(A1),
        replace(RUNS_A, workload=W, answered=True, sent_hash="hash-a", acked_version=1),
    ),
    (
        "base not retained (out of the window, or another control plane's): full snapshot",
        ACKED_A,
        serve(E5),
        SendSnapshot(Sent("2", 5, "hash-e", 50.0), E5),
        replace(ACKED_A, nonces=2, sent_hash="hash-e", pending=Sent("2", 5, "hash-e", 50.0)),
    ),
    (
        "agent without deltas: full snapshot",
        replace(ACKED_A, deltas=False),
        serve(B2),
        SendSnapshot(Sent("2", 2, "hash-b", 20.0), B2),
        replace(
            ACKED_A,
            deltas=False,
            nonces=2,
            sent_hash="hash-b",
            pending=Sent("2", 2, "hash-b", 20.0),
        ),
    ),
    (
        "resync owed: the full snapshot of the content just sent, resync paid",
        RESYNC_B,
        serve(B2),
        SendSnapshot(Sent("3", 2, "hash-b", 20.0), B2, resync=True),
        replace(RESYNC_B, nonces=3, pending=Sent("3", 2, "hash-b", 20.0), resync=False),
    ),
    (
        "resync owed, content went back to what the agent runs: still the full snapshot",
        RESYNC_B,
        serve(A4),
        SendSnapshot(Sent("3", 4, "hash-a", 40.0), A4, resync=True),
        replace(
            RESYNC_B,
            nonces=3,
            sent_hash="hash-a",
            pending=Sent("3", 4, "hash-a", 40.0),
            resync=False,
        ),
    ),
    (
        "resync owed, no target: Waiting, the resync stays owed",
        RESYNC_B,
        NOT_YET,
        SendWaiting(NOT_YET.reason),
        replace(RESYNC_B, waiting_reason=NOT_YET.reason),
    ),
    (
        "resync paid, C published: deltas again, from B",
        replace(RESYNC_B, nonces=3, pending=None, acked_hash="hash-b", resync=False),
        serve(C3),
        SendDelta(Sent("4", 3, "hash-c", 30.0, base="hash-b"), C3),
        replace(
            RESYNC_B,
            nonces=4,
            acked_hash="hash-b",
            sent_hash="hash-c",
            pending=Sent("4", 3, "hash-c", 30.0, base="hash-b"),
            resync=False,
        ),
    ),
]


@pytest.mark.parametrize(
    ("state", "target", "decision", "after"),
    [row[1:] for row in DOWN],
    ids=[row[0] for row in DOWN],
)
def test_next_message_with_deltas(
    state: StreamState, target: Target, decision: protocol.Down, after: StreamState
) -> None:
    assert protocol.next_message(state, target) == (after, decision)


UP = [
    # id, state, (nonce, error, resync), outcome, next state
    (
        "resync Nack of the pending delta: the full snapshot is owed",
        PENDING_DELTA_B,
        ("2", "no base", True),
        Nacked(DELTA_B, "no base", resync=True),
        RESYNC_B,
    ),
    (
        "plain Nack of a delta: nothing owed",
        PENDING_DELTA_B,
        ("2", "bad", False),
        Nacked(DELTA_B, "bad"),
        replace(
            PENDING_DELTA_B,
            pending=None,
            nacked=DELTA_B,
            last_nack_error="bad",
            last_nack_version=2,
        ),
    ),
    (
        "resync Nack of a full snapshot: an ordinary Nack (resending it would loop)",
        PENDING_A,
        ("1", "bad", True),
        Nacked(SENT_A, "bad"),
        NACKED_A,
    ),
    (
        "resync Nack of a superseded delta: stale, nothing owed",
        replace(PENDING_DELTA_B, nonces=3, pending=Sent("3", 3, "hash-c", 30.0, "hash-b")),
        ("2", "no base", True),
        Stale("Nack", "2"),
        replace(
            PENDING_DELTA_B,
            nonces=3,
            pending=Sent("3", 3, "hash-c", 30.0, "hash-b"),
            ignored_messages=1,
        ),
    ),
]


@pytest.mark.parametrize(
    ("state", "message", "outcome", "after"),
    [row[1:] for row in UP],
    ids=[row[0] for row in UP],
)
def test_nack_with_resync(
    state: StreamState, message: tuple[str, str, bool], outcome: object, after: StreamState
) -> None:
    assert protocol.on_nack(state, *message) == (after, outcome)


def test_the_hello_announces_deltas() -> None:
    assert initial_state("", 0, 1.0, deltas=True) == StreamState(opened_at=1.0, deltas=True)
    assert not initial_state("hash-a", 1, 1.0).deltas


STEPS = st.lists(
    st.one_of(
        st.sampled_from([serve(A1), serve(B2), serve(C3), serve(A4), serve(E5), NOT_YET]),
        st.sampled_from(["ack", "nack", "resync"]),
    ),
    max_size=40,
)


@given(start=st.sampled_from([FRESH, RUNS_A]), steps=STEPS)
def test_every_delta_starts_from_what_the_agent_holds(
    start: StreamState, steps: list[object]
) -> None:
    """Over any interleaving: a delta's base is the content last sent (or confirmed) on
    the stream, else the Hello's, and is retained by the target; the same content goes
    twice in a row only as the full snapshot a resync asked for, and a valid resync Nack
    is always answered by a full snapshot next."""
    state = start
    held = start.acked_hash
    owed = False
    for step in steps:
        if isinstance(step, Target):
            state, decision = protocol.next_message(state, step)
            if isinstance(decision, SendDelta):
                assert not owed
                assert decision.sent.base == held != ""
                assert held in decision.published.bases
                assert decision.sent.content_hash != held
            if isinstance(decision, SendSnapshot):
                assert decision.resync == owed
                assert decision.sent.content_hash != held or owed
            if isinstance(decision, SendSnapshot | SendDelta):
                held = decision.sent.content_hash
                owed = False
            if isinstance(decision, SendInSync):
                assert not owed
                held = decision.published.content_hash
        elif step == "ack":
            state, _ = protocol.on_ack(state, state.last_nonce)
        else:
            pending = state.pending
            state, _ = protocol.on_nack(state, state.last_nonce, "e", step == "resync")
            if step == "resync" and pending is not None and pending.base:
                owed = True
        assert state.resync == owed
