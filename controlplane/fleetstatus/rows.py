"""`controlplane status` as data: one row per agent and per workload from ListAgents and
ListWorkloads, each agent in one state, worst first, and the exit status. Pure: no gRPC,
no clock (`now` is given), no terminal.

An agent's state, from what the control plane sent it and what it answered (as
`istioctl proxy-status` reads nonces sent and acknowledged):

- NACKED: it refused the last version sent (`last_nack_error`); HAProxy keeps running
  the version it acknowledged before.
- STALE: a version was sent and is not acknowledged yet (`pending_since`: for how long).
- NOT SENT: connected, but nothing is pending and it does not run the current version
  (no snapshot for its pod yet, or the control plane says wait).
- SYNCED: it acknowledged the workload's current version.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from peerplane.v1 import peerplane_pb2 as pb


class State(enum.Enum):
    NACKED = "NACKED"
    STALE = "STALE"
    NOT_SENT = "NOT SENT"
    SYNCED = "SYNCED"


_RANK = {State.NACKED: 0, State.STALE: 1, State.NOT_SENT: 2, State.SYNCED: 3}
DEFAULT_STALE_AFTER_S = 30.0


@dataclass(frozen=True)
class AgentRow:
    """One agent as `status` shows it."""

    workload: str
    pod: str
    node: str
    haproxy: str
    state: State
    current_version: int
    acked_version: int
    acked_age: float | None  # seconds since the last Ack (or the Hello reporting it)
    applied_by: str
    pending_version: int = 0
    pending_age: float | None = None  # STALE: seconds since the pending version was sent
    nack_version: int = 0
    nack_reason: str = ""
    peers_connected: int | None = None  # None: no report yet
    peers: int | None = None
    tables: tuple[tuple[str, int], ...] = ()
    report_age: float | None = None  # seconds since the last report was read
    set_aside: tuple[pb.SetAsidePart, ...] = ()  # what its last Ack runs without
    set_aside_count: int = 0

    def stale_for(self, seconds: float) -> bool:
        """STALE for longer than `seconds`."""
        return self.state is State.STALE and (self.pending_age or 0.0) > seconds

    def as_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "pod": self.pod,
            "node": self.node,
            "haproxy_version": self.haproxy,
            "state": self.state.value,
            "current_version": self.current_version,
            "acked_version": self.acked_version,
            "acked_age_seconds": _rounded(self.acked_age),
            "applied_by": self.applied_by,
            "pending_version": self.pending_version,
            "pending_seconds": _rounded(self.pending_age),
            "nacked_version": self.nack_version,
            "nack_reason": self.nack_reason,
            "peers_connected": self.peers_connected,
            "peers": self.peers,
            "stick_table_entries": dict(self.tables),
            "report_age_seconds": _rounded(self.report_age),
            "set_aside_count": self.set_aside_count,
            "set_aside": [
                {"kind": p.kind, "name": p.name, "fingerprint": p.fingerprint, "reason": p.reason}
                for p in self.set_aside
            ],
        }


@dataclass(frozen=True)
class WorkloadRow:
    """One workload: its version, how many agents run it, what may be wrong."""

    workload: str
    version: int
    in_sync: int
    connected: int
    warnings: int
    endpoints_waiting: int
    states: dict[str, int] = field(default_factory=dict)  # agents per state

    @property
    def worst(self) -> int:
        ranks = [r for s, r in _RANK.items() if self.states.get(s.value)]
        return min(ranks, default=_RANK[State.SYNCED])

    def as_json(self) -> dict[str, object]:
        return {
            "workload": self.workload,
            "version": self.version,
            "agents_in_sync": self.in_sync,
            "agents_connected": self.connected,
            "warnings": self.warnings,
            "endpoints_waiting": self.endpoints_waiting,
            "agents_by_state": dict(self.states),
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time from the server or an agent; None when empty or unreadable."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _age(text: str, now: datetime) -> float | None:
    moment = parse_time(text)
    return None if moment is None else max(0.0, (now - moment).total_seconds())


def state_of(agent: pb.AgentStatus) -> State:
    """The one state an agent is in (the module docstring says what each means)."""
    if agent.last_nack_error or agent.last_nack_version:
        return State.NACKED
    if agent.pending_version:
        return State.STALE
    if agent.acked_content_hash and agent.current_version == agent.acked_version:
        return State.SYNCED
    return State.NOT_SENT


def agent_row(agent: pb.AgentStatus, now: datetime) -> AgentRow:
    state = state_of(agent)
    report = agent.report if agent.HasField("report") else None
    peers = connected = None
    tables: tuple[tuple[str, int], ...] = ()
    if report is not None:
        peers = len(report.peer_sessions)
        connected = sum(s.connected for s in report.peer_sessions)
        tables = tuple((t.table, t.entries) for t in report.tables)
    applied_by = agent.applied_by or (report.last_applied_by if report is not None else "")
    return AgentRow(
        workload=agent.workload,
        pod=agent.agent,
        node=agent.node_name,
        haproxy=agent.haproxy_version,
        state=state,
        current_version=agent.current_version,
        acked_version=agent.acked_version if agent.acked_content_hash else 0,
        acked_age=_age(agent.acked_at, now),
        applied_by=applied_by,
        pending_version=agent.pending_version,
        pending_age=_age(agent.pending_since, now) if agent.pending_version else None,
        nack_version=agent.last_nack_version,
        nack_reason=agent.last_nack_error,
        peers_connected=connected,
        peers=peers,
        tables=tables,
        report_age=_age(report.observed_at, now) if report is not None else None,
        set_aside=tuple(agent.set_aside),
        set_aside_count=max(agent.set_aside_count, len(agent.set_aside)),
    )


def _worst_first(row: AgentRow) -> tuple[int, float, str, str]:
    return (_RANK[row.state], -(row.pending_age or 0.0), row.workload, row.pod)


def agent_rows(agents: list[pb.AgentStatus], now: datetime, workload: str = "") -> list[AgentRow]:
    """Every agent (of `workload` when given), worst first: NACKED, STALE (longest
    first), NOT SENT, SYNCED; then by workload and pod."""
    rows = [agent_row(a, now) for a in agents if not workload or a.workload == workload]
    return sorted(rows, key=_worst_first)


def workload_rows(
    workloads: list[pb.WorkloadSummary], agents: list[AgentRow], workload: str = ""
) -> list[WorkloadRow]:
    """Every workload (or `workload`), worst first by its agents' states."""
    states: dict[str, dict[str, int]] = {}
    for row in agents:
        counts = states.setdefault(row.workload, {})
        counts[row.state.value] = counts.get(row.state.value, 0) + 1
    rows = [
        WorkloadRow(
            workload=w.workload,
            version=w.version,
            in_sync=w.agents_in_sync,
            connected=w.agents_connected,
            warnings=w.warnings,
            endpoints_waiting=w.endpoints_waiting,
            states=states.get(w.workload, {}),
        )
        for w in workloads
        if not workload or w.workload == workload
    ]
    return sorted(rows, key=lambda r: (r.worst, r.workload))


def problems(rows: list[AgentRow], stale_after: float) -> list[str]:
    """Why `status` exits non-zero: an agent NACKED, or STALE longer than `stale_after`."""
    found = []
    for row in rows:
        if row.state is State.NACKED:
            found.append(f"{row.pod} NACKED v{row.nack_version}")
        elif row.stale_for(stale_after):
            found.append(
                f"{row.pod} STALE for {row.pending_age:.0f}s (over {stale_after:g}s) "
                f"on v{row.pending_version}"
            )
    return found
