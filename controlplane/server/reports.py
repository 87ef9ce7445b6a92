"""What an agent says about itself (its Hello's HAProxy version, its Acks' `applied_by`
and parts set aside, its `AgentReport`s), kept bounded: every string cut, every list
capped, so an odd or hostile agent costs the control plane a fixed amount of memory per stream and
ListAgents stays small. Nothing here is trusted: the text is escaped for display
(`peerplane.runtime.untrusted.clean`) before it is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from peerplane.runtime.untrusted import clean
from peerplane.v1 import peerplane_pb2 as pb

MAX_VERSION_CHARS = 32  # "3.2.26"; a distribution suffix at most
MAX_WORD_CHARS = 16  # applied_by, a peer state ("ESTA", "CONN")
MAX_TIME_CHARS = 40  # RFC 3339
MAX_NAME_CHARS = 128  # a peer (pod) or table (backend) name
MAX_PEERS = 256
MAX_TABLES = 1024
MAX_KEY_CHARS = 256  # a table's name as held for merging; shown cut to MAX_NAME_CHARS
MIN_GAP_S = 0.5  # reports kept per stream: at most two a second (agents send one)
MAX_SET_ASIDE = 256  # parts set aside kept per agent (the Ack says how many more)
MAX_FINGERPRINT_CHARS = 64  # SHA-256 hex
MAX_REASON_CHARS = 400  # the agent's or HAProxy's words


def word(text: str, limit: int = MAX_WORD_CHARS) -> str:
    """A short agent-given string, escaped and cut."""
    return clean(text, limit)


def set_aside(
    parts: Sequence[pb.SetAsidePart], count: int = 0
) -> tuple[tuple[pb.SetAsidePart, ...], int]:
    """The first MAX_SET_ASIDE parts an Ack names, each string cut, and how many are set
    aside (the Ack's count, at least as many as it names)."""
    kept = tuple(
        pb.SetAsidePart(
            kind=word(p.kind),
            name=word(p.name, MAX_NAME_CHARS),
            fingerprint=word(p.fingerprint, MAX_FINGERPRINT_CHARS),
            reason=word(p.reason, MAX_REASON_CHARS),
        )
        for p in parts[:MAX_SET_ASIDE]
    )
    return kept, max(count, len(parts))


def bounded(report: pb.AgentReport) -> pb.AgentReport:
    """A copy of `report` within the bounds: the first MAX_PEERS sessions and the
    MAX_TABLES fullest of the first 4 x MAX_TABLES tables (an agent sends at most its
    4,096 fullest, by name), each string cut."""
    kept = _without_tables(report)
    kept.MergeFrom(pb.AgentReport(tables=bounded_tables(report)))
    return kept


def bounded_tables(report: pb.AgentReport) -> list[pb.TableEntries]:
    """The MAX_TABLES fullest of the first 4 x MAX_TABLES tables of `report`, by name,
    each name cut."""
    # The fullest tables of the first few thousand listed: sorting is bounded too.
    tables = fullest(report.tables[: 4 * MAX_TABLES])
    return [
        pb.TableEntries(table=word(t.table, MAX_NAME_CHARS), entries=t.entries)
        for t in sorted(tables, key=lambda t: t.table)
    ]


def fullest(tables: Sequence[pb.TableEntries]) -> list[pb.TableEntries]:
    """The MAX_TABLES fullest of `tables`: the most entries first, ties by name."""
    return sorted(tables, key=lambda t: (-t.entries, t.table))[:MAX_TABLES]


def _without_tables(report: pb.AgentReport) -> pb.AgentReport:
    """`report`'s fields but its tables, within the bounds."""
    return pb.AgentReport(
        haproxy_version=word(report.haproxy_version, MAX_VERSION_CHARS),
        last_applied_by=word(report.last_applied_by),
        last_applied_at=word(report.last_applied_at, MAX_TIME_CHARS),
        observed_at=word(report.observed_at, MAX_TIME_CHARS),
        peer_sessions=[
            pb.PeerSession(
                name=word(s.name, MAX_NAME_CHARS), state=word(s.state), connected=s.connected
            )
            for s in report.peer_sessions[:MAX_PEERS]
        ],
    )


# The report's fields but its tables, cleared before the tables are hashed.
_NOT_TABLES = tuple(f.name for f in pb.AgentReport.DESCRIPTOR.fields if f.name != "tables")


def tables_digest(report: pb.AgentReport) -> bytes:
    """SHA-256 of `report`'s tables as sent (serialized and hashed at C speed), and of
    any field this control plane does not know: equal digests, equal tables; a newer
    agent's unknown field only makes the tables bounded again. Discarding unknown fields
    walked the 4,096 tables and was half the digest's cost (1.5 of 3 ms per report)."""
    tables = pb.AgentReport()
    tables.CopyFrom(report)  # whole messages are copied in C, repeated fields in Python
    for name in _NOT_TABLES:
        tables.ClearField(name)
    return hashlib.sha256(tables.SerializeToString(deterministic=True)).digest()


class HeldReport:
    """One stream's reports as the control plane keeps them: the last full report bounded,
    with every partial report since merged into it (docs/design.md, "The agent stream").

    The tables are held by name (cut to MAX_KEY_CHARS, past any backend name's length)
    and turned into the bounded message only when it is read (`view`, for ListAgents): a
    partial report costs what it lists. A full report whose tables have the last full
    one's digest keeps them as held: an agent without partial reports sends all its
    tables after every apply, most often the same ones (bounding them again cost about
    3.6 ms per report at 8,000 Services)."""

    def __init__(self) -> None:
        self._digest = b""  # of the last full report's tables (and unknown fields)
        self._tables: dict[str, int] = {}  # name -> entries: the MAX_TABLES fullest
        self._fields = pb.AgentReport()  # the report's other fields, bounded
        self._view: pb.AgentReport | None = None  # built from the two on demand
        self.sequence = 0  # the number of the report kept last (0: not numbered)
        self.tables_bounded = 0  # full reports whose tables were bounded (not reused)

    def full(self, report: pb.AgentReport) -> None:
        """Keep a full report in place of everything held."""
        digest = tables_digest(report)
        if digest != self._digest:
            self._tables = {
                t.table[:MAX_KEY_CHARS]: t.entries for t in fullest(report.tables[: 4 * MAX_TABLES])
            }
            self._digest = digest
            self.tables_bounded += 1
        self._fields = _without_tables(report)
        self.sequence = report.sequence
        self._view = None

    def merge(self, report: pb.AgentReport) -> bool:
        """Merge a partial report into what is held; False (nothing changed) when it does
        not follow the report kept last, or the result would hold more than MAX_TABLES."""
        if not self.sequence or report.sequence != self.sequence + 1:
            return False
        if len(report.tables) > MAX_TABLES or len(report.removed_tables) > MAX_TABLES:
            return False  # a correct agent lists at most the terms' MAX_TABLES
        tables = self._tables
        removed = [name[:MAX_KEY_CHARS] for name in report.removed_tables]
        changed = [(t.table[:MAX_KEY_CHARS], t.entries) for t in report.tables]
        gone = {name for name in removed if name in tables}
        new = {name for name, _ in changed if name not in tables or name in gone}
        if len(tables) - len(gone) + len(new) > MAX_TABLES:
            return False
        for name in removed:
            tables.pop(name, None)
        tables.update(changed)
        fields = _without_tables(report)
        if not report.peers_changed:
            del fields.peer_sessions[:]
            fields.peer_sessions.extend(self._fields.peer_sessions)
        self._fields = fields
        self._digest = b""  # the held tables are no full report's any more
        self.sequence = report.sequence
        self._view = None
        return True

    def view(self) -> pb.AgentReport:
        """What the last full report would say, bounded, as ListAgents shows it."""
        if self._view is None:
            view = pb.AgentReport()
            view.CopyFrom(self._fields)
            view.tables.extend(
                pb.TableEntries(table=word(name, MAX_NAME_CHARS), entries=entries)
                for name, entries in sorted(self._tables.items())
            )
            self._view = view
        return self._view
