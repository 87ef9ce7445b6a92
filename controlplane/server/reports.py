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
    listed = report.tables[: 4 * MAX_TABLES]
    tables = sorted(listed, key=lambda t: (-t.entries, t.table))[:MAX_TABLES]
    return [
        pb.TableEntries(table=word(t.table, MAX_NAME_CHARS), entries=t.entries)
        for t in sorted(tables, key=lambda t: t.table)
    ]


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


class ReportBounds:
    """`bounded` for one stream's reports, bounding the tables again only when they
    differ from the last report's. An agent reports after every apply with all its
    tables (one per backend, 4,096 at most), most often the same ones: bounding them in
    Python cost about 3.6 ms per report at 8,000 Services, per agent, per endpoint
    change; comparing their digest costs a tenth of that."""

    def __init__(self) -> None:
        self._digest = b""
        self._tables = pb.AgentReport()  # the last tables bounded, alone
        self.tables_bounded = 0  # reports whose tables were bounded (not reused)

    def bounded(self, report: pb.AgentReport) -> pb.AgentReport:
        digest = tables_digest(report)
        if digest != self._digest:
            self._tables = pb.AgentReport(tables=bounded_tables(report))
            self._digest = digest
            self.tables_bounded += 1
        kept = _without_tables(report)
        kept.MergeFrom(self._tables)
        return kept
