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

A report is full (every peer session, the fullest tables) or, once the control plane's
ReportTerms said it merges them, partial: only the tables and peer sessions that changed
since the last report on the stream (`ReportStream`; the contract is the proto's
AgentReport). An endpoint change at 8,000 Services then sends no table at all, where a
full report listed 4,096.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
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


Peers = tuple[tuple[str, str, bool], ...]  # (name, state, connected) as `show peers` lists them


@dataclass(frozen=True)
class Reading:
    """One read of `show peers;show table`: when (monotonic), its time as the report
    says it, the peer sessions and every table's entries (never mutated: a read that
    finds the same tables shares the last one's, so equal tables are one object)."""

    at: float
    observed_at: str
    peers: Peers
    tables: Mapping[str, int]


@dataclass(frozen=True)
class LastApply:
    """How and when HAProxy last took a snapshot (an ACK's `applied_by`)."""

    applied_by: str = ""
    applied_at: str = ""  # RFC 3339


class Reporter:
    """Reads HAProxy's persistence state; `read` answers `show peers;show table` on the
    runtime socket (`HAProxy.runtime` in production). What a stream's reports say of
    it is `ReportStream`'s."""

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
        self._tables: Mapping[str, int] = {}  # table -> entries, as last read (and exported)
        self._last_read: Reading | None = None
        # The fullest tables of the last read asked for, and of which tables and bound.
        self._fullest: tuple[Mapping[str, int], int, dict[str, int]] | None = None
        self._listed: tuple[dict[str, int], pb.AgentReport] | None = None  # their message
        self.clock = time.monotonic

    def observe(self, last: LastApply, fresh: bool = True) -> Reading | None:
        """Read HAProxy now (blocking: call it in a thread); None when it cannot be read.

        `fresh=False` (the report after an apply): after a runtime update or no change,
        the last read does, while it is younger than `interval`. `show table` lists every
        table (one per backend): at 8,000 Services HAProxy spends ~120 ms on it and holds
        its runtime socket meanwhile, and a runtime update changes no table or peer
        session. After a reload or a start, the read is fresh."""
        kept = self._last_read
        if (
            not fresh
            and kept is not None
            and last.applied_by in SAME_PEERS_AND_TABLES
            and self.clock() - kept.at < self.interval
        ):
            return kept
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
        tables: Mapping[str, int] = parse_table_usage(text)
        self._export(sessions, tables)
        if tables == self._tables:
            tables = self._tables  # the same tables: one object, compared by identity
        self._tables = tables
        peers = tuple((s.name, s.state, s.connected) for s in sessions)
        self._last_read = Reading(at, rfc3339(datetime.now(UTC)), peers, tables)
        return self._last_read

    def fullest(self, tables: Mapping[str, int], limit: int) -> dict[str, int]:
        """The `limit` fullest of `tables` (the most entries first, ties by name); the
        same object while `tables` and `limit` are."""
        cached = self._fullest
        if cached is not None and cached[0] is tables and cached[1] == limit:
            return cached[2]
        chosen = dict(sorted(tables.items(), key=lambda t: (-t[1], t[0]))[:limit])
        self._fullest = (tables, limit, chosen)
        return chosen

    def listed(self, fullest: dict[str, int]) -> pb.AgentReport:
        """A report holding `fullest` alone, by name (merged into a full report: a whole
        message is copied in C); the same object while `fullest` is."""
        cached = self._listed
        if cached is not None and cached[0] is fullest:
            return cached[1]
        entries = [pb.TableEntries(table=n, entries=c) for n, c in sorted(fullest.items())]
        listed = pb.AgentReport(tables=entries)
        self._listed = (fullest, listed)
        return listed

    def _export(self, sessions: list[PeerSession], tables: Mapping[str, int]) -> None:
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


@dataclass(frozen=True)
class _Said:
    """What the reports sent on a stream say, all of them taken together."""

    tables: dict[str, int]  # the fullest tables, as the control plane holds them
    peers: Peers
    last: LastApply
    under_terms: bool  # sent under the control plane's terms: a partial may follow


class ReportStream:
    """One stream's reports, built from reads (pure: no I/O, no clock).

    Every report is numbered. Until the control plane sends ReportTerms (only one that
    merges partial reports does, to an agent whose Hello said it sends them) every report
    is full, as an agent without partial reports sends it. Under terms, the first report
    is full, bounded to the terms' `max_tables`, and each later one is partial: the
    tables whose count changed or that joined the fullest, the names of those that left,
    the peer sessions only when they changed (docs/design.md, "The agent stream")."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.sequence = 0  # of the last report built
        self.max_tables = MAX_TABLES  # the tables a report lists at most
        self.terms = False  # the control plane merges partial reports
        self._said: _Said | None = None

    def take_terms(self, terms: pb.ReportTerms) -> bool:
        """The control plane's ReportTerms: the next report is full and lists at most
        `max_tables` tables. True when reports were sent before them: one is due now."""
        self.terms = True
        if terms.max_tables:
            self.max_tables = min(MAX_TABLES, terms.max_tables)
        self._said = None
        return self.sequence > 0

    def due_after(self, applied: LastApply) -> bool:
        """Whether an apply makes a report due. Under terms, not after a runtime update or
        an apply that changed nothing: they change no peer session or table, and the ACK
        said how HAProxy took the change; a report then cost the control plane a message
        (~0.5 ms of CPU per agent per endpoint change at 8,000 Services) to say it again.
        Without terms, after every apply, as agents always did."""
        return not self.terms or applied.applied_by not in SAME_PEERS_AND_TABLES

    def next(self, read: Reading, last: LastApply, due: bool) -> pb.AgentReport | None:
        """The report of `read` after `last`; None when it is not `due` (at the start,
        after an apply that makes one due, after terms) and its peer sessions and tables
        are those the last one said, and (without terms) its last apply too."""
        tables = self.reporter.fullest(read.tables, self.max_tables)
        said = self._said
        if (
            not due
            and said is not None
            and said.tables == tables
            and said.peers == read.peers
            and (self.terms or said.last == last)
        ):
            return None
        self.sequence += 1
        report = pb.AgentReport(
            haproxy_version=self.reporter.haproxy_version,
            last_applied_by=last.applied_by,
            last_applied_at=last.applied_at,
            observed_at=read.observed_at,
            sequence=self.sequence,
        )
        if said is not None and said.under_terms:
            report.partial = True
            if said.peers != read.peers:
                report.peers_changed = True
                report.peer_sessions.extend(_peer_sessions(read.peers))
            if said.tables is not tables:
                report.tables.extend(
                    pb.TableEntries(table=name, entries=count)
                    for name, count in sorted(tables.items())
                    if said.tables.get(name) != count
                )
                report.removed_tables.extend(sorted(said.tables.keys() - tables.keys()))
        else:
            report.peer_sessions.extend(_peer_sessions(read.peers))
            report.MergeFrom(self.reporter.listed(tables))
        self._said = _Said(tables, read.peers, last, self.terms)
        return report


def _peer_sessions(peers: Peers) -> list[pb.PeerSession]:
    return [pb.PeerSession(name=n, state=s, connected=c) for n, s, c in peers]


async def report_loop(
    reporter: Reporter,
    send: Callable[[pb.AgentMessage], Awaitable[None]],
    applied: asyncio.Event,
    last: Callable[[], LastApply],
    stream: ReportStream | None = None,
) -> None:
    """One stream's reports until cancelled: one at the start, one after each apply that
    makes one due (`ReportStream.due_after`) and after ReportTerms (`applied` set), and
    one whenever a read finds a change."""
    stream = stream if stream is not None else ReportStream(reporter)
    due = fresh = True
    while True:
        if not due:
            try:
                await asyncio.wait_for(applied.wait(), reporter.interval)
                due, fresh = True, False  # after an apply: the last read may do
            except TimeoutError:
                fresh = True
        applied.clear()
        applying = last()
        if due and not fresh:
            due = stream.due_after(applying)  # terms owed make the report full anyway
        read = await asyncio.to_thread(reporter.observe, applying, fresh)
        report = None if read is None else stream.next(read, applying, due)
        if report is not None:
            await send(pb.AgentMessage(report=report))
        due = False
        await asyncio.sleep(reporter.min_gap)
