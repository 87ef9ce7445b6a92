"""What the stream client logs and counts for each event: a snapshot or delta received, a
note from the server, a resync asked, an ACK or NACK sent, a snapshot superseded in the
apply loop's single slot. One place per event, so every line and metric is the same
whichever path led to it.
"""

from __future__ import annotations

import asyncio
import logging

from nodeagent.logformat import fields
from nodeagent.metrics import AgentMetrics
from nodeagent.stream import protocol
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger("nodeagent.stream.client")  # the stream's one logger, as before


def snapshot_received(nonce: str, snap: pb.Snapshot) -> None:
    log.info(
        "snapshot received workload=%s version=%d hash=%.12s nonce=%s",
        snap.workload,
        snap.version,
        snap.content_hash,
        nonce,
        extra=fields(event="snapshot", workload=snap.workload, version=snap.version, nonce=nonce),
    )


def delta_received(metrics: AgentMetrics, nonce: str, delta: pb.SnapshotDelta) -> None:
    metrics.deltas.inc()
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
        extra=fields(event="delta", workload=delta.workload, version=delta.version, nonce=nonce),
    )


def noted(note: protocol.Note, msg: pb.ServerMessage) -> None:
    if note.kind == "in_sync":
        log.info(
            "in sync at version=%d hash=%.12s",
            msg.in_sync.version,
            msg.in_sync.content_hash,
            extra=fields(event="in_sync", version=msg.in_sync.version),
        )
    elif note.kind == "waiting":
        log.info("control plane says wait: %s", msg.waiting.reason)
    else:
        log.warning("ignoring unknown server message %s", note.kind)


def resync_asked(metrics: AgentMetrics, reason: str, msg: pb.ServerMessage) -> None:
    metrics.delta_resyncs.inc()
    log.warning(
        "delta not applied, asking for the full snapshot (resync): %s nonce=%s",
        reason,
        msg.nonce,
        extra=fields(event="delta_resync", workload=msg.delta.workload, version=msg.delta.version),
    )


def sent(metrics: AgentMetrics, answer: protocol.Answer) -> pb.AgentMessage:
    """The one place an ACK or NACK is logged and counted, whoever decided it."""
    msg = answer.message
    if answer.ok:
        a = msg.ack
        metrics.acks.inc()
        retried = f", after {answer.attempts} attempts" if answer.attempts > 1 else ""
        log.info(
            "ACK workload=%s version=%d nonce=%s (%s%s)",
            answer.workload,
            a.version,
            a.nonce,
            answer.path,
            retried,
            extra=fields(
                event="ack",
                workload=answer.workload,
                version=a.version,
                nonce=a.nonce,
                path=answer.path,
            ),
        )
        return msg
    n = msg.nack
    metrics.nacks.inc()
    log.warning(
        "NACK workload=%s version=%d nonce=%s: %s",
        answer.workload,
        n.version,
        n.nonce,
        n.error,
        extra=fields(
            event="nack",
            error=n.error,
            workload=answer.workload,
            version=n.version,
            nonce=n.nonce,
            path=answer.path,
        ),
    )
    return msg


def coalesce(latest: asyncio.Queue[protocol.Apply], decision: protocol.Decision) -> None:
    """Do what `protocol.coalesce` decides with the apply loop's single slot."""
    waiting = latest.get_nowait() if latest.full() else None
    keep, dropped = protocol.coalesce(waiting, decision)
    if dropped is not None:
        if keep is not None:
            log.info(
                "coalesced: version %d superseded by %d", dropped.held.version, keep.held.version
            )
        else:
            log.info(
                "superseded: version %d (nonce %s) will not be applied",
                dropped.held.version,
                dropped.nonce,
            )
    if keep is not None:
        latest.put_nowait(keep)
