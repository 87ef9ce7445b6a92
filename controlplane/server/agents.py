"""Connected agents: one session per stream, and the registry ListAgents reads.

A session lives exactly as long as its stream: reconnecting starts from a fresh session
(xDS rule), seeded only with what the agent reports in its Hello. Its protocol state is
the immutable `protocol.StreamState`, which only the stream replaces; the registry lets
inspection read it and lets tests await a change instead of sleeping.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from controlplane.server import reports
from controlplane.server.protocol import Sent, StreamState, initial_state
from peerplane.v1 import peerplane_pb2 as pb


def rfc3339(moment: datetime | None) -> str:
    """An RFC 3339 UTC time, "" for none."""
    if moment is None:
        return ""
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(slots=True)
class AgentSession:
    """What the server knows about one connected agent (one stream)."""

    stream_id: int
    pod: str  # "namespace/name"
    node_name: str
    agent_version: str
    peer_address: str
    connected_at: datetime
    state: StreamState
    identity: str = ""  # the authenticated caller (token username), "" without auth
    # What the agent says about itself (bounded by `reports`) and when things happened,
    # for ListAgents and `controlplane status`; the protocol never reads these.
    haproxy_version: str = ""  # the Hello's, then its reports'
    applied_by: str = ""  # the last Ack's: how HAProxy took the acknowledged version
    # The last Ack's parts the agent runs without (bounded), and how many it named.
    set_aside: tuple[pb.SetAsidePart, ...] = ()
    set_aside_count: int = 0
    acked_at: datetime | None = None  # the last Ack, or the Hello that reported a version
    sent_at: datetime | None = None  # the last snapshot or delta sent (pending since)
    sent_nonce: str = ""  # the nonce `sent_at` belongs to
    held: reports.HeldReport | None = None  # the agent's reports, bounded and merged
    reported_at: float = 0.0  # monotonic time the last report was kept
    # The agent's Hello said it sends partial reports and this server merges them: it is
    # sent ReportTerms, first with the Hello's answer (`terms_owed` set at open).
    partial_reports: bool = False
    terms_owed: bool = False  # ReportTerms go out with (or as) the next message
    awaiting_full: bool = False  # ReportTerms went out and no full report came since

    @property
    def report(self) -> pb.AgentReport | None:
        """The agent's last report, bounded, with the partial ones since merged into it;
        None until one is kept."""
        return None if self.held is None else self.held.view()

    # Read-only views of the protocol state, for inspection and tests.
    @property
    def workload(self) -> str:
        return self.state.workload

    @property
    def acked_version(self) -> int:
        return self.state.acked_version

    @property
    def acked_hash(self) -> str:
        return self.state.acked_hash

    @property
    def pending(self) -> Sent | None:
        return self.state.pending

    @property
    def last_nack_error(self) -> str:
        return self.state.last_nack_error

    @property
    def last_nack_version(self) -> int:
        return self.state.last_nack_version

    @property
    def ignored_messages(self) -> int:
        return self.state.ignored_messages

    def to_proto(self, current_version: int = 0) -> pb.AgentStatus:
        """The ListAgents entry; `current_version`: the workload's current version."""
        state = self.state
        pending = state.pending
        pending_since = ""
        if pending is not None and pending.nonce == self.sent_nonce:
            pending_since = rfc3339(self.sent_at)
        status = pb.AgentStatus(
            pending_since=pending_since,
            acked_at=rfc3339(self.acked_at) if state.acked_hash else "",
            haproxy_version=self.haproxy_version,
            applied_by=self.applied_by,
            current_version=current_version,
            agent=self.pod,
            node_name=self.node_name,
            workload=state.workload,
            peer_address=self.peer_address,
            acked_version=state.acked_version,
            acked_content_hash=state.acked_hash,
            pending_version=state.pending.version if state.pending else 0,
            last_nack_error=state.last_nack_error,
            last_nack_version=state.last_nack_version,
            connected_since=rfc3339(self.connected_at),
            agent_version=self.agent_version,
            deltas=state.deltas,
            set_aside=self.set_aside,
            set_aside_count=self.set_aside_count,
        )
        report = self.report
        if report is not None:
            status.report.CopyFrom(report)
        return status

    def sent(self, nonce: str, now: datetime | None = None) -> None:
        """A snapshot or delta under `nonce` went out now."""
        self.sent_nonce, self.sent_at = nonce, now or datetime.now(UTC)

    def acked(
        self,
        applied_by: str,
        now: datetime | None = None,
        set_aside: Sequence[pb.SetAsidePart] = (),
        set_aside_count: int = 0,
    ) -> None:
        """The pending version was acknowledged; `applied_by` and the parts set aside as
        the Ack says."""
        self.applied_by, self.acked_at = reports.word(applied_by), now or datetime.now(UTC)
        self.set_aside, self.set_aside_count = reports.set_aside(set_aside, set_aside_count)

    def reported(self, report: pb.AgentReport, now: float | None = None) -> bool:
        """Keep the agent's report, bounded (a partial one merged into what is held); its
        HAProxy version replaces the Hello's. False (ignored) when it follows the last one
        kept within `reports.MIN_GAP_S` (an agent sends at most one a second, so only a
        misbehaving one is cut short), or when it is partial and cannot be merged: the
        report before it was not kept. An agent that said it sends partial reports is then
        owed ReportTerms (`terms_owed`), which make its next report full."""
        moment = time.monotonic() if now is None else now
        if not report.partial:
            self.awaiting_full = False  # the terms were read: unmergeable ones ask again
        if self.held is not None and moment - self.reported_at < reports.MIN_GAP_S:
            return False
        if report.partial:
            if self.held is None or not self.held.merge(report):
                if self.partial_reports and not self.awaiting_full:
                    self.terms_owed = True
                return False
        else:
            if self.held is None:
                self.held = reports.HeldReport()
            self.held.full(report)
        self.reported_at = moment
        version = reports.word(report.haproxy_version, reports.MAX_VERSION_CHARS)
        if version:
            self.haproxy_version = version
        return True

    def take_terms(self) -> bool:
        """Whether ReportTerms are owed now (and no longer, once taken)."""
        owed, self.terms_owed = self.terms_owed, False
        self.awaiting_full = self.awaiting_full or owed
        return owed


class AgentRegistry:
    """Connected agents by stream id; notifies waiters on every change."""

    def __init__(self) -> None:
        self._sessions: dict[int, AgentSession] = {}
        self._ids = itertools.count(1)
        # Replaced and set on every change: waking needs no lock and no await, so a
        # stream's cleanup wakes waiters even when its task is being cancelled.
        self._changed = asyncio.Event()

    def open(
        self,
        hello: pb.Hello,
        peer_address: str,
        now: datetime | None = None,
        *,
        deltas: bool = False,
        partial_reports: bool = False,
    ) -> AgentSession:
        """A session for a stream; `deltas` when the server sends deltas to agents that
        accept them, `partial_reports` when it merges partial reports of agents that send
        them (this one still has to announce each in its Hello)."""
        partial = partial_reports and hello.partial_reports
        connected_at = now or datetime.now(UTC)
        session = AgentSession(
            haproxy_version=reports.word(hello.haproxy_version, reports.MAX_VERSION_CHARS),
            acked_at=connected_at if hello.applied_content_hash else None,
            stream_id=next(self._ids),
            pod=f"{hello.pod_namespace}/{hello.pod_name}",
            node_name=hello.node_name,
            agent_version=hello.agent_version,
            peer_address=peer_address,
            connected_at=connected_at,
            state=initial_state(
                hello.applied_content_hash,
                hello.applied_version,
                time.monotonic(),
                deltas=deltas and hello.accepts_deltas,
            ),
            partial_reports=partial,
            terms_owed=partial,
        )
        self._sessions[session.stream_id] = session
        return session

    def close(self, session: AgentSession) -> None:
        self._sessions.pop(session.stream_id, None)
        self._wake()

    def sessions(self, workload: str = "") -> list[AgentSession]:
        """Sessions (of one workload when given), sorted by agent then connection time."""
        found = [s for s in self._sessions.values() if not workload or s.workload == workload]
        return sorted(found, key=lambda s: (s.pod, s.stream_id))

    async def changed(self) -> None:
        """Wake `wait_until` callers: call after mutating a session."""
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until `predicate()` holds after some session change; TimeoutError if not."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()
