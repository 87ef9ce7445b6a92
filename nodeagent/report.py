"""What only the agent knows, sent to the control plane as an `AgentReport`: the HAProxy
it drives, how and when the last change was applied, its peer sessions (`show peers`)
and the entries of each stick table (`show table`).

The reports travel on the stream beside the ACKs but never on the apply's path: the
client's report task reads the runtime socket in a thread after an apply finished (after
a runtime update, the last read again while it is younger than `interval`: the update
changed no table or peer session) and then every `interval` seconds, and sends only
when the report differs from the last one sent on this stream (the time it was read
aside), at most once per `min_gap`. The same read sets the agent's persistence gauges.
A failing read (HAProxy not up yet, a reload in progress) is logged once until a read
succeeds again, and never ends the stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from nodeagent.haproxy import HAProxyError
from nodeagent.haproxy.parse import PeerSession, parse_peer_sessions, parse_table_usage
from nodeagent.metrics import AgentMetrics
from peerplane.v1 import peerplane_pb2 as pb

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 10.0
MIN_GAP_S = 1.0  # at most one report a second, however often snapshots apply
MAX_TABLES = 4096  # tables sent: the fullest ones (the control plane bounds them too)
MAX_PEERS = 512


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# How an apply left HAProxy's peer sessions and stick tables as they were: the report
# after it may send the last read again (`Reporter.observe`).
SAME_PEERS_AND_TABLES = frozenset({"runtime", "nothing"})


@dataclass(frozen=True)
class _Read:
    """One read of `show peers;show table`: when (monotonic), its time as the report
    says it, and the peer sessions (the tables are the Reporter's own)."""

    at: float
    observed_at: str
    peers: list[pb.PeerSession]


@dataclass(frozen=True)
class LastApply:
    """How and when HAProxy last took a snapshot (an ACK's `applied_by`)."""

    applied_by: str = ""
    applied_at: str = ""  # RFC 3339


class Reporter:
    """Reads HAProxy's persistence state and builds reports; `read` answers
    `show peers;show table` on the runtime socket (`HAProxy.runtime` in production)."""

    def __init__(
        self,
        read: Callable[[str], str],
        haproxy_version: str,
        metrics: AgentMetrics | None = None,
        interval: float = DEFAULT_INTERVAL_S,
        min_gap: float = MIN_GAP_S,
    ) -> None:
        self.read = read
        self.haproxy_version = haproxy_version
        self.metrics = metrics if metrics is not None else AgentMetrics()
        self.interval = interval
        self.min_gap = min(min_gap, interval)
        self._failing = False  # the last read failed and was logged
        self._answered = False  # HAProxy answered once: a failure now is worth a warning
        self._tables: dict[str, int] = {}  # table -> entries, as last read (and exported)
        self._fullest = pb.AgentReport()  # the tables part of the last report, alone
        self._last_read: _Read | None = None
        self.clock = time.monotonic

    def observe(self, last: LastApply, fresh: bool = True) -> pb.AgentReport | None:
        """Read HAProxy now (blocking: call it in a thread); None when it cannot be read.

        `fresh=False` (the report after an apply): after a runtime update or no change,
        the peers and tables of the last read are sent again with the new `last`, while
        that read is younger than `interval`. `show table` lists every table (one per
        backend): at 8,000 Services HAProxy spends ~120 ms on it and holds its runtime
        socket meanwhile, and a runtime update changes no table or peer session. After a
        reload or a start, the read is fresh."""
        kept = self._last_read
        if (
            not fresh
            and kept is not None
            and last.applied_by in SAME_PEERS_AND_TABLES
            and self.clock() - kept.at < self.interval
        ):
            return self._report(last, kept)
        try:
            at = self.clock()
            text = self.read("show peers;show table")
        except (OSError, HAProxyError) as e:
            if not self._failing:  # before HAProxy first answered: it is starting
                level = logging.WARNING if self._answered else logging.INFO
                log.log(level, "cannot read show peers / show table for the report: %s", e)
            self._failing = True
            return None
        if self._failing and self._answered:
            log.info("show peers / show table readable again")
        self._failing, self._answered = False, True
        sessions = parse_peer_sessions(text)[:MAX_PEERS]
        tables = parse_table_usage(text)
        self._export(sessions, tables)
        if tables != self._tables or not self._fullest.tables:
            fullest = sorted(tables.items(), key=lambda t: (-t[1], t[0]))[:MAX_TABLES]
            entries = [pb.TableEntries(table=n, entries=c) for n, c in sorted(fullest)]
            self._fullest = pb.AgentReport(tables=entries)
        self._tables = tables
        peers = [
            pb.PeerSession(name=s.name, state=s.state, connected=s.connected) for s in sessions
        ]
        self._last_read = _Read(at, rfc3339(datetime.now(UTC)), peers)
        return self._report(last, self._last_read)

    def _report(self, last: LastApply, read: _Read) -> pb.AgentReport:
        report = pb.AgentReport(
            haproxy_version=self.haproxy_version,
            last_applied_by=last.applied_by,
            last_applied_at=last.applied_at,
            peer_sessions=read.peers,
            observed_at=read.observed_at,
        )
        report.MergeFrom(self._fullest)  # a whole message is copied in C
        return report

    def _export(self, sessions: list[PeerSession], tables: dict[str, int]) -> None:
        """The gauges; a table's only when its count changed since the last read (one per
        backend: at 8,000 Services setting them all was most of a report's cost, and a
        report follows every apply)."""
        m = self.metrics
        m.peers.set(len(sessions))
        m.peers_connected.set(sum(s.connected for s in sessions))
        before = self._tables
        for name in before.keys() - tables.keys():
            m.stick_table_entries.remove(name)
        for name, count in tables.items() - before.items():
            m.stick_table_entries.labels(name).set(count)


def same(a: pb.AgentReport | None, b: pb.AgentReport) -> bool:
    """Whether two reports say the same thing (the time each was read aside)."""
    if a is None:
        return False
    return a.SerializeToString(deterministic=True) == _without_time(b)


def _without_time(report: pb.AgentReport) -> bytes:
    copy = pb.AgentReport()
    copy.CopyFrom(report)
    copy.ClearField("observed_at")
    return copy.SerializeToString(deterministic=True)


async def report_loop(
    reporter: Reporter,
    send: Callable[[pb.AgentMessage], Awaitable[None]],
    applied: asyncio.Event,
    last: Callable[[], LastApply],
) -> None:
    """One stream's reports until cancelled: one at the start, one after each apply
    (`applied` set), and one whenever the periodic read finds a change."""
    sent: pb.AgentReport | None = None  # the last one sent, its time cleared
    due = fresh = True
    while True:
        if not due:
            try:
                await asyncio.wait_for(applied.wait(), reporter.interval)
                due, fresh = True, False  # after an apply: the last read may do
            except TimeoutError:
                fresh = True
        applied.clear()
        report = await asyncio.to_thread(reporter.observe, last(), fresh)
        if report is not None and (due or not same(sent, report)):
            await send(pb.AgentMessage(report=report))
            sent = pb.AgentReport.FromString(_without_time(report))
        due = False
        await asyncio.sleep(reporter.min_gap)
