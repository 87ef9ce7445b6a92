"""`controlplane status` rows as text (aligned columns, a NACK's reason on its own line,
cut to the terminal width) or as JSON. Pure: the width is given."""

from __future__ import annotations

import json
from collections.abc import Sequence

from controlplane.fleetstatus.rows import AgentRow, State, WorkloadRow
from peerplane.runtime.untrusted import escape

MAX_TABLES_SHOWN = 3  # stick tables named per agent row; the rest are summed


def age(seconds: float | None) -> str:
    """ "45s", "12m", "3h", "2d"; "-" when unknown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def _state(row: AgentRow) -> str:
    if row.state is State.STALE:
        return f"STALE v{row.pending_version} {age(row.pending_age)}"
    if row.state is State.NACKED:
        return f"NACKED v{row.nack_version}"
    return str(row.state.value)


def _acked(row: AgentRow) -> str:
    if not row.acked_version:
        return "-"
    behind = "" if row.acked_version == row.current_version else f"/{row.current_version}"
    return f"v{row.acked_version}{behind} {age(row.acked_age)}"


def _peers(row: AgentRow) -> str:
    return "-" if row.peers is None else f"{row.peers_connected}/{row.peers}"


def _tables(row: AgentRow) -> str:
    if row.peers is None:
        return "-"
    if not row.tables:
        return "none"
    fullest = sorted(row.tables, key=lambda t: (-t[1], t[0]))
    shown = [f"{escape(name)}={count}" for name, count in fullest[:MAX_TABLES_SHOWN]]
    rest = fullest[MAX_TABLES_SHOWN:]
    if rest:
        shown.append(f"+{len(rest)} more={sum(c for _, c in rest)}")
    return " ".join(shown)


def _columns(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [list(header), *rows]) for i in range(len(header))]
    lines = []
    for r in [list(header), *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return lines


def cut(text: str, width: int) -> str:
    """`text` on one line within `width` characters ("..." marks a cut)."""
    flat = escape(" ".join(text.split()))
    return flat if len(flat) <= width else flat[: max(0, width - 3)] + "..."


def text(
    workloads: list[WorkloadRow], agents: list[AgentRow], width: int, problems: list[str]
) -> str:
    """The workloads table, then the agents table, worst first; a NACKed agent's reason
    follows its row, cut to `width`; the verdict last."""
    out = _columns(
        ("WORKLOAD", "VERSION", "IN SYNC", "WARNINGS", "ENDPOINTS WAITING"),
        [
            [
                escape(w.workload),
                f"v{w.version}",
                f"{w.in_sync}/{w.connected}",
                str(w.warnings),
                str(w.endpoints_waiting),
            ]
            for w in workloads
        ],
    )
    out.append("")
    body = [
        [
            escape(a.pod),
            escape(a.workload) or "-",
            escape(a.node) or "-",
            escape(a.haproxy) or "-",
            _state(a),
            _acked(a),
            escape(a.applied_by) or "-",
            _peers(a),
            _tables(a),
        ]
        for a in agents
    ]
    lines = _columns(
        (
            "POD",
            "WORKLOAD",
            "NODE",
            "HAPROXY",
            "STATE",
            "ACKED",
            "APPLIED BY",
            "PEERS",
            "STICK ENTRIES",
        ),
        body,
    )
    out.append(lines[0])
    for row, line in zip(agents, lines[1:], strict=True):
        out.append(line)
        if row.state is State.NACKED:
            out.append("  " + cut(f"rejected v{row.nack_version}: {row.nack_reason}", width - 2))
        out += _set_aside(row, width)
    if not agents:
        out.append("(no agent connected)")
    out.append("")
    if problems:
        out.append(f"NOT OK: {len(problems)} agent(s): " + "; ".join(problems))
    else:
        out.append("OK")
    return "\n".join(out) + "\n"


def _set_aside(row: AgentRow, width: int, most: int = 5) -> list[str]:
    """Under an agent's line: the parts its acknowledged version runs without (a tenant's
    refused certificate, backend or route rule: the rest applies, so it is no fleet problem)."""
    lines = [
        "  " + cut(f"set aside {escape(p.kind)} {escape(p.name)}: {escape(p.reason)}", width - 2)
        for p in row.set_aside[:most]
    ]
    more = row.set_aside_count - len(lines)
    if more > 0:
        lines.append(f"  set aside: {more} more (status --json, ListAgents)")
    return lines


def as_json(
    workloads: list[WorkloadRow], agents: list[AgentRow], problems: list[str], stale_after: float
) -> str:
    return (
        json.dumps(
            {
                "ok": not problems,
                "problems": problems,
                "stale_after_seconds": stale_after,
                "workloads": [w.as_json() for w in workloads],
                "agents": [a.as_json() for a in agents],
            },
            indent=2,
        )
        + "\n"
    )
