"""What an agent says about itself (its Hello's HAProxy version, its Acks' `applied_by`,
its `AgentReport`s), kept bounded: every string cut, every list capped, so an odd or
hostile agent costs the control plane a fixed amount of memory per stream and
ListAgents stays small. Nothing here is trusted: the text is escaped for display
(`peerplane.runtime.untrusted.clean`) before it is kept.
"""

from __future__ import annotations

from peerplane.runtime.untrusted import clean
from peerplane.v1 import peerplane_pb2 as pb

MAX_VERSION_CHARS = 32  # "3.2.26"; a distribution suffix at most
MAX_WORD_CHARS = 16  # applied_by, a peer state ("ESTA", "CONN")
MAX_TIME_CHARS = 40  # RFC 3339
MAX_NAME_CHARS = 128  # a peer (pod) or table (backend) name
MAX_PEERS = 256
MAX_TABLES = 1024
MIN_GAP_S = 0.5  # reports kept per stream: at most two a second (agents send one)


def word(text: str, limit: int = MAX_WORD_CHARS) -> str:
    """A short agent-given string, escaped and cut."""
    return clean(text, limit)


def bounded(report: pb.AgentReport) -> pb.AgentReport:
    """A copy of `report` within the bounds: the first MAX_PEERS sessions and the
    MAX_TABLES fullest of the first 4 x MAX_TABLES tables (an agent sends at most its
    4,096 fullest, by name), each string cut."""
    # The fullest tables of the first few thousand listed: sorting is bounded too.
    listed = report.tables[: 4 * MAX_TABLES]
    tables = sorted(listed, key=lambda t: (-t.entries, t.table))[:MAX_TABLES]
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
        tables=[
            pb.TableEntries(table=word(t.table, MAX_NAME_CHARS), entries=t.entries)
            for t in sorted(tables, key=lambda t: t.table)
        ],
    )
