"""The agent's stream protocol, by table (docs/design.md, "The agent stream").

Every row is one decision of the pure `nodeagent/stream/protocol.py`: a state and a server
message, an apply result, or the apply loop's slot, and exactly what the agent does and
sends. No gRPC and no HAProxy here; the same rules over real streams are in
agent/test_client.py and agent/test_delta_apply.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nodeagent.apply.outcome import Result, SetAside
from nodeagent.config.changes import ApplyPath
from nodeagent.held import Held
from nodeagent.stream import protocol
from nodeagent.stream.protocol import (
    AfterApply,
    Apply,
    Identity,
    Note,
    Refuse,
    StreamState,
)
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import backend, snapshot

pytestmark = pytest.mark.unit  # pure: selected by `-m unit` although the folder is integration


def version(n: int, shop: str = "10.0.0.1") -> pb.Snapshot:
    """Version `n` of one workload, with its real content hash; `shop` moves an endpoint."""
    backends = [
        backend("default_other_http", [("10.0.0.9", 8080)]),
        backend("default_shop_http", [(shop, 8080)]),
    ]
    return hashed(snapshot([("pod-a", "10.0.1.1", 10000)], backends), version=n)


V1, V2, V3 = version(1), version(2, shop="10.0.0.2"), version(3, shop="10.0.0.3")
H1, H2 = Held.from_snapshot(V1), Held.from_snapshot(V2)


def full(snap: pb.Snapshot, nonce: str) -> pb.ServerMessage:
    return pb.ServerMessage(nonce=nonce, snapshot=snap)


def delta(d: pb.SnapshotDelta, nonce: str) -> pb.ServerMessage:
    return pb.ServerMessage(nonce=nonce, delta=d)


def wrong_to() -> pb.SnapshotDelta:
    d = delta_between(V1, V2)
    d.to_content_hash = "f" * 64
    return d


def other_base() -> pb.SnapshotDelta:
    d = delta_between(V1, V2)
    d.from_content_hash = "e" * 64
    return d


def duplicate_backend() -> pb.Snapshot:
    s = pb.Snapshot()
    s.CopyFrom(V2)
    s.backends.append(s.backends[0])
    return s


# ---------------------------------------------------------------------- opening


@pytest.mark.parametrize(
    ("applied", "reported", "base"),
    [
        pytest.param(None, "", None, id="nothing-applied"),
        pytest.param(H1, V1.content_hash, V1.content_hash, id="hello-names-the-held-content"),
        pytest.param(H1, "", None, id="unsaved-hello-names-nothing"),
        pytest.param(H1, V2.content_hash, None, id="an-apply-finished-in-between"),
    ],
)
def test_the_delta_base_of_a_new_stream_is_what_the_hello_reported(
    applied: Held | None, reported: str, base: str | None
) -> None:
    state = protocol.opened(applied, reported)
    assert (state.base.content_hash if state.base else None) == base


def test_the_hello_says_who_what_runs_and_whether_deltas_are_accepted() -> None:
    msg = protocol.hello(Identity("ns", "pod-a", "node-1"), "h" * 64, 7, "0.1.0", deltas=False)
    assert msg.WhichOneof("message") == "hello"
    assert msg.hello == pb.Hello(
        contract=CONTRACT,
        pod_namespace="ns",
        pod_name="pod-a",
        node_name="node-1",
        applied_content_hash="h" * 64,
        applied_version=7,
        agent_version="0.1.0",
        accepts_deltas=False,
    )


# ---------------------------------------------------------------------- server messages


@dataclass(frozen=True)
class Row:
    """A state (its base), one server message, and the decision and next base expected."""

    base: Held | None
    msg: pb.ServerMessage
    decision: type[Apply] | type[Refuse] | type[Note]
    next_base: str | None  # the content hash held after it
    applies: tuple[int, str] | None = None  # Apply: (version, content hash) handed over
    changed: frozenset[str] | None = None  # Apply of a delta: the backends it changed
    nack: tuple[int, str, bool] | None = None  # Refuse: (version, content hash, resync)
    error: str = ""  # Refuse: text the NACK's error holds
    note: str = ""  # Note: its kind


ROWS = {
    "snapshot-is-held-and-applied": Row(
        None, full(V1, "n1"), Apply, V1.content_hash, applies=(1, V1.content_hash)
    ),
    "snapshot-replaces-the-base": Row(
        H1, full(V2, "n1"), Apply, V2.content_hash, applies=(2, V2.content_hash)
    ),
    "delta-on-its-base-is-materialized": Row(
        H1,
        delta(delta_between(V1, V2), "n2"),
        Apply,
        V2.content_hash,
        applies=(2, V2.content_hash),
        changed=frozenset({"default_shop_http"}),
    ),
    "delta-without-a-base-is-a-resync": Row(
        None,
        delta(delta_between(V1, V2), "n2"),
        Refuse,
        None,
        nack=(2, V2.content_hash, True),
        error="this agent holds no snapshot on this stream",
    ),
    "delta-on-another-base-is-a-resync": Row(
        H1,
        delta(other_base(), "n2"),
        Refuse,
        None,
        nack=(2, V2.content_hash, True),
        error="it applies to eeeeeeeeeeee",
    ),
    "delta-to-another-hash-is-a-resync": Row(
        H1,
        delta(wrong_to(), "n2"),
        Refuse,
        None,
        nack=(2, "f" * 64, True),
        error="content hash",
    ),
    "delta-of-the-held-content-again-is-a-resync": Row(
        H2,
        delta(delta_between(V1, V2), "n2"),
        Refuse,
        None,
        nack=(2, V2.content_hash, True),
        error=f"it applies to {V1.content_hash[:12]}",
    ),
    "snapshot-that-cannot-be-held-is-a-final-nack": Row(
        H1,
        full(duplicate_backend(), "n3"),
        Refuse,
        None,
        nack=(2, V2.content_hash, False),
        error="render: duplicate backend 'default_other_http'",
    ),
    "in-sync-is-noted": Row(
        H1,
        pb.ServerMessage(in_sync=pb.InSync(version=1, content_hash=V1.content_hash)),
        Note,
        V1.content_hash,
        note="in_sync",
    ),
    "waiting-is-noted": Row(
        None,
        pb.ServerMessage(waiting=pb.Waiting(reason="no snapshot computed yet")),
        Note,
        None,
        note="waiting",
    ),
    "an-unknown-message-is-ignored": Row(H1, pb.ServerMessage(), Note, V1.content_hash),
}


@pytest.mark.parametrize("row", ROWS.values(), ids=ROWS.keys())
def test_each_server_message(row: Row) -> None:
    state, decision = protocol.on_message(StreamState(base=row.base), row.msg)
    assert isinstance(decision, row.decision), decision
    assert (state.base.content_hash if state.base else None) == row.next_base
    if isinstance(decision, Apply):
        assert decision.nonce == row.msg.nonce
        assert (decision.held.version, decision.held.content_hash) == row.applies
        assert decision.held.computed_hash() == decision.held.content_hash
        if row.changed is None:
            assert decision.change is None
        else:
            assert decision.change is not None and decision.change.backends == row.changed
        assert state.base is decision.held  # the next delta's base
    elif isinstance(decision, Refuse):
        answer = decision.answer
        assert answer.message.WhichOneof("message") == "nack" and not answer.ok
        nack = answer.message.nack
        assert nack.nonce == row.msg.nonce
        assert (nack.version, nack.content_hash, nack.resync) == row.nack
        assert decision.resync == nack.resync
        assert row.error in nack.error and nack.error == decision.reason
        if nack.resync:
            d = row.msg.delta
            assert nack.error.startswith(f"delta from {d.from_content_hash[:12] or '(none)'} to ")
        assert answer.path is None
    else:
        assert decision == Note(row.note)


def test_a_stream_of_messages_walks_the_base() -> None:
    """Snapshot, delta, a bad delta (resync: nothing held), a delta then (resync again),
    the full snapshot the server sends next, and a delta on it."""
    state = StreamState()
    script = [
        (full(V1, "1"), Apply),
        (delta(delta_between(V1, V2), "2"), Apply),
        (delta(wrong_to(), "3"), Refuse),
        (delta(delta_between(V2, V3), "4"), Refuse),
        (full(V2, "5"), Apply),
        (delta(delta_between(V2, V3), "6"), Apply),
    ]
    held: list[str | None] = []
    for msg, expected in script:
        state, decision = protocol.on_message(state, msg)
        assert isinstance(decision, expected), (msg.nonce, decision)
        held.append(state.base.content_hash if state.base else None)
    h1, h2, h3 = V1.content_hash, V2.content_hash, V3.content_hash
    assert held == [h1, h2, None, None, h2, h3]


# ---------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("result", "attempt", "kind", "path", "attempts", "error"),
    [
        pytest.param(Result(True, ApplyPath.RELOAD), 1, "ack", "reload", 1, "", id="ack-reload"),
        pytest.param(
            Result(True, ApplyPath.RUNTIME), 3, "ack", "runtime", 3, "", id="ack-after-retries"
        ),
        pytest.param(Result(True, ApplyPath.NOTHING), 1, "ack", "nothing", 1, "", id="ack-nothing"),
        pytest.param(
            Result(True, ApplyPath.RELOAD, started=True), 1, "ack", "reload", 1, "", id="ack-start"
        ),
        pytest.param(
            Result(False, ApplyPath.RELOAD, error="reload failed: x", retryable=True),
            1,
            "nack",
            "reload",
            1,
            "reload failed: x",
            id="nack-with-path",
        ),
        pytest.param(
            Result(False, error="render: bad"), 1, "nack", None, 1, "render: bad", id="nack-no-path"
        ),
    ],
)
def test_the_answer_to_an_apply_echoes_its_nonce_version_and_hash(
    result: Result, attempt: int, kind: str, path: str | None, attempts: int, error: str
) -> None:
    answer = protocol.answer("nonce-7", H2, result, attempt)
    msg = answer.message
    assert msg.WhichOneof("message") == kind and answer.ok == (kind == "ack")
    assert (answer.workload, answer.path, answer.attempts) == (H2.workload, path, attempts)
    if kind == "ack":  # applied_by: how HAProxy took it, "start" for its first config
        applied_by = "start" if result.started else path
        assert msg.ack == pb.Ack(
            nonce="nonce-7", version=2, content_hash=V2.content_hash, applied_by=applied_by
        )
    else:
        assert msg.nack == pb.Nack(
            nonce="nonce-7", version=2, content_hash=V2.content_hash, error=error
        )


@pytest.mark.parametrize(
    ("ok", "retryable", "attempt", "after"),
    [
        pytest.param(True, False, 1, AfterApply(send=True, retry=False), id="ack"),
        pytest.param(True, False, 4, AfterApply(send=True, retry=False), id="ack-ends-retries"),
        pytest.param(False, True, 1, AfterApply(send=True, retry=True), id="first-nack-retried"),
        pytest.param(False, True, 2, AfterApply(send=False, retry=True), id="one-nack-per-nonce"),
        pytest.param(False, False, 1, AfterApply(send=True, retry=False), id="final-nack"),
        pytest.param(False, False, 3, AfterApply(send=False, retry=False), id="final-in-retries"),
    ],
)
def test_after_an_apply(ok: bool, retryable: bool, attempt: int, after: AfterApply) -> None:
    assert protocol.after_apply(Result(ok, retryable=retryable), attempt) == after


@pytest.mark.parametrize(
    ("delay", "attempt", "cap", "then"),
    [(1.0, 1, 30.0, (2.0, 2)), (0.05, 2, 30.0, (0.1, 3)), (20.0, 5, 30.0, (30.0, 6))],
)
def test_retries_back_off_doubling_up_to_the_cap(
    delay: float, attempt: int, cap: float, then: tuple[float, int]
) -> None:
    assert protocol.next_retry(delay, attempt, cap) == then


# ---------------------------------------------------------------------- coalescing

A = Apply("n1", H1)
B = Apply("n2", H2)
REFUSED = Refuse(protocol.nack("n3", 3, "c" * 64, "e", "w", resync=True), "e")
NOTED = Note("in_sync")


@pytest.mark.parametrize(
    ("waiting", "decision", "keep", "dropped"),
    [
        pytest.param(None, A, A, None, id="empty-slot-takes-it"),
        pytest.param(A, B, B, A, id="newer-replaces-the-waiting-one"),
        pytest.param(A, REFUSED, None, A, id="a-nack-supersedes-the-waiting-one"),
        pytest.param(None, REFUSED, None, None, id="a-nack-on-an-empty-slot"),
        pytest.param(A, NOTED, A, None, id="a-note-keeps-it"),
        pytest.param(None, NOTED, None, None, id="a-note-on-an-empty-slot"),
    ],
)
def test_coalescing_keeps_only_the_newest_snapshot_waiting(
    waiting: Apply | None,
    decision: protocol.Decision,
    keep: Apply | None,
    dropped: Apply | None,
) -> None:
    assert protocol.coalesce(waiting, decision) == (keep, dropped)


def test_every_nack_is_built_in_one_place() -> None:
    answer = protocol.nack("n", 4, "d" * 64, "why", "w", path="runtime", resync=True)
    assert answer.message.nack == pb.Nack(
        nonce="n", version=4, content_hash="d" * 64, error="why", resync=True
    )
    assert (answer.workload, answer.path, answer.ok) == ("w", "runtime", False)


def test_an_ack_names_the_parts_set_aside_the_first_256_and_their_count() -> None:
    parts = tuple(
        SetAside("certificate", f"b_tls-{i:04}", "ab" * 32, "ee key too small") for i in range(300)
    )
    result = Result(True, ApplyPath.RELOAD, set_aside=parts)
    ack = protocol.answer("nonce-7", H2, result, 1).message.ack
    assert ack.set_aside_count == 300
    assert len(ack.set_aside) == protocol.MAX_SET_ASIDE_SENT == 256
    assert ack.set_aside[0] == pb.SetAsidePart(
        kind="certificate", name="b_tls-0000", fingerprint="ab" * 32, reason="ee key too small"
    )
