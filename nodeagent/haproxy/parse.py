"""HAProxy's replies as data: pure parsers of the master CLI and runtime API text.

`show proc` (workers, reload counters, uptimes), the master CLI's `reload` reply (2.7+),
`show table`, `show info`, `show peers`, `show servers state`. No sockets here: the
driver (`driver.py`) asks, these read; a reply that is not what HAProxy says is an
`HAProxyError`. HAProxy's own output lines (ALERT, WARNING) are read in `masterlog.py`,
its version in `version.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from nodeagent.haproxy import HAProxyError

_PROC_LINE = re.compile(r"^(\d+)\s+(master|worker|program)\s+(\d+)(?:\s+\[failed:\s*(\d+)\])?")
_PEERS_SECTION = re.compile(r"\bid=(\S+) disabled=\d+ flags=0x([0-9a-fA-F]+)")
# `show proc` lines with the uptime column: `<pid> <type> <reloads> [failed: n] <uptime>`.
_PROC_UPTIME = re.compile(
    r"^(\d+)\s+(master|worker)\s+(\d+)(?:\s+\[failed:\s*\d+\])?\s+(\d+)d(\d+)h(\d+)m(\d+)s", re.M
)


@dataclass(frozen=True)
class ProcInfo:
    """`show proc` of the master: reload counters and the workers."""

    master_pid: int
    reloads: int
    failed_reloads: int
    workers: tuple[tuple[int, int], ...]  # (pid, reloads survived)

    @property
    def current_worker(self) -> int | None:
        """The serving worker: the one that survived the fewest reloads. Usually 0, but a
        failed reload counts too: the worker that keeps serving then shows 1 (3.2 even
        lists it under `# old workers`)."""
        if not self.workers:
            return None
        return min(self.workers, key=lambda w: (w[1], -w[0]))[0]


def parse_show_proc(text: str) -> ProcInfo:
    master: tuple[int, int, int] | None = None
    workers: list[tuple[int, int]] = []
    for line in text.splitlines():
        m = _PROC_LINE.match(line.strip())
        if not m:
            continue
        pid, kind, reloads = int(m.group(1)), m.group(2), int(m.group(3))
        if kind == "master":
            master = (pid, reloads, int(m.group(4) or 0))
        elif kind == "worker":
            workers.append((pid, reloads))
    if master is None:
        raise HAProxyError(f"unexpected show proc reply: {text.strip()[:200]!r}")
    return ProcInfo(master[0], master[1], master[2], tuple(workers))


@dataclass(frozen=True)
class ReloadReply:
    """The master CLI's answer to `reload` (HAProxy 2.7+): outcome and the startup log."""

    ok: bool
    log: tuple[str, ...]


def parse_reload_reply(text: str) -> ReloadReply | None:
    """`Success=1|0`, `--`, then the new process's startup log; None for 2.6's silence
    (or anything else that is not such a reply)."""
    lines = text.strip().splitlines()
    if not lines or lines[0].strip() not in ("Success=1", "Success=0"):
        return None
    body = lines[2:] if len(lines) > 1 and lines[1].strip() == "--" else lines[1:]
    return ReloadReply(lines[0].strip() == "Success=1", tuple(body))


_TABLE_HEADER = re.compile(r"^# table: ([^,\s]+), type: \S+, size:\d+, used:(\d+)", re.M)
_INFO_PID = re.compile(r"^Pid: (\d+)$", re.M)


def parse_table_usage(text: str) -> dict[str, int]:
    """`show table` (no argument) -> table name -> entries in use."""
    return {m.group(1): int(m.group(2)) for m in _TABLE_HEADER.finditer(text)}


def parse_backend_sessions(text: str) -> dict[str, tuple[int, int]]:
    """`show stat -1 2 -1` (CSV, the backends' rows) -> backend name -> (current
    sessions, total sessions); the columns found by the header's names."""
    lines = text.splitlines()
    header = next((line for line in lines if line.startswith("# pxname,")), None)
    if header is None:
        return {}
    names = header[2:].split(",")
    wanted = ("pxname", "svname", "scur", "stot")
    if not all(name in names for name in wanted):  # the wait then counts every entry
        return {}
    at = {name: names.index(name) for name in wanted}
    last = max(at.values())
    sessions: dict[str, tuple[int, int]] = {}
    for line in lines:
        if not line or line.startswith("#"):
            continue
        row = line.split(",", last + 1)  # ~100 columns, 8,000 rows at 8,000 Services
        if len(row) > last and row[at["svname"]] == "BACKEND":
            scur, stot = row[at["scur"]], row[at["stot"]]
            sessions[row[at["pxname"]]] = (int(scur or 0), int(stot or 0))
    return sessions


def stored_entries(
    used: Mapping[str, int],
    before: Mapping[str, tuple[int, int]],
    after: Mapping[str, tuple[int, int]],
) -> dict[str, int]:
    """Each table's entries less those its backend's streams may hold unstored.

    `show table`'s `used` also counts an entry a stream allocated for its store rule
    (`stick on`) and stores only when the response comes, one per request in flight, even
    from a client whose entry exists (measured on 2.6.12: 2 entries listed, `used` 3 with
    one request in flight). Those never reach a new worker, so a count taken under
    traffic is too high for the handover to reach. The streams in flight while `used`
    was read are at most those current when `before` was read plus those started until
    `after` (`show stat` read before and after `show table`); each holds at most one
    entry of its backend's table (one store rule per backend)."""
    stored: dict[str, int] = {}
    for name, count in used.items():
        current, total = before.get(name, (0, 0))
        started = max(0, after.get(name, (current, total))[1] - total)
        stored[name] = max(0, count - current - started)
    return stored


def parse_info_pid(text: str) -> int | None:
    """The `Pid:` line of `show info`: which worker answered."""
    match = _INFO_PID.search(text)
    return int(match.group(1)) if match else None


def parse_peers_flags(text: str) -> dict[str, int]:
    """Section name -> flags from `show peers`."""
    return {m.group(1): int(m.group(2), 16) for m in _PEERS_SECTION.finditer(text)}


@dataclass(frozen=True)
class ServerState:
    address: str
    port: int
    enabled: bool
    down: bool = False  # operationally stopped (failed health checks, or in maintenance)


def parse_servers_state(text: str) -> dict[str, ServerState]:
    """`show servers state B` -> server name -> state (admin state without maint bits)."""
    servers: dict[str, ServerState] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 19 or fields[0].startswith("#"):
            continue
        admin = int(fields[6])
        down = int(fields[5]) == 0  # srv_op_state 0: SRV_ST_STOPPED
        servers[fields[3]] = ServerState(fields[4], int(fields[18]), admin & 0x3 == 0, down)
    return servers


def parse_uptimes(text: str) -> tuple[int, float, int | None, float]:
    """`show proc` -> (master pid, master age, serving worker pid, its age); the serving
    worker is the one that survived the fewest reloads (as `ProcInfo.current_worker`)."""
    master: tuple[int, float] | None = None
    workers: list[tuple[int, int, float]] = []  # (reloads, -pid, age)
    for m in _PROC_UPTIME.finditer(text):
        days, hours, minutes, seconds = (int(m.group(i)) for i in range(4, 8))
        age = float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)
        if m.group(2) == "master":
            master = (int(m.group(1)), age)
        else:
            workers.append((int(m.group(3)), -int(m.group(1)), age))
    if master is None:
        raise HAProxyError(f"unexpected show proc reply: {text.strip()[:200]!r}")
    if not workers:
        return master[0], master[1], None, 0.0
    _, pid, age = min(workers)
    return master[0], master[1], -pid, age


# `show peers`: one line per peer, `0x...: id=NAME(local|remote,active|inactive) addr=...
# [app_state=... learn_state=...] last_status=WORD`, then, while it has a session, a line
# `flags=... appctx:... state=EST|TAR|...`. The same on 2.6, 3.0 and 3.2 (checked on each).
_PEER_LINE = re.compile(
    r"^\s+0x[0-9a-fA-F]+: id=(?P<name>[^(\s]+)"
    r"\((?P<side>local|remote),(?P<active>active|inactive)\).*?\blast_status=(?P<status>\S+)",
)
_SESSION_STATE = re.compile(r"\bappctx:(?P<appctx>\S+) .*\bstate=(?P<state>\w+)")
_SECTION_LINE = re.compile(r"^0x[0-9a-fA-F]+: .*\bid=\S+ disabled=")


@dataclass(frozen=True)
class PeerSession:
    """One remote peer as `show peers` shows it."""

    name: str
    state: str  # HAProxy's last_status (ESTA, CONN, NONE, ...); CLOSED: was ESTA, gone now
    connected: bool  # a session is up now (active, its appctx in state EST)
    # Which session (its appctx address) while one exists: a session killed and made again
    # (a collision: both sides connected at once) has another one.
    session: str = ""

    @property
    def established(self) -> bool:
        """A session is up and its peers handshake is done (`last_status=ESTA` on it):
        updates flow both ways."""
        return self.connected and self.state == "ESTA"


def parse_peer_sessions(text: str) -> list[PeerSession]:
    """`show peers` -> the remote peers of every section, in HAProxy's order. A peer is
    connected only while it has a session in state EST: `last_status=ESTA` stays after
    the session closed (2.6, 3.0), so it alone is no proof."""
    found: list[PeerSession] = []
    current: dict[str, str] | None = None

    def close() -> None:
        if current is not None and current["side"] == "remote":
            up = current["active"] == "active" and current.get("session") == "EST"
            status = current["status"]
            if not up and status == "ESTA":
                status = "CLOSED"
            found.append(PeerSession(current["name"], status, up, current.get("appctx", "")))

    for line in text.splitlines():
        peer = _PEER_LINE.match(line)
        if peer is not None:
            close()
            current = peer.groupdict()
            continue
        if _SECTION_LINE.match(line):
            close()
            current = None
            continue
        if current is not None and "session" not in current:
            state = _SESSION_STATE.search(line)
            if state is not None:
                current["session"] = state.group("state")
                current["appctx"] = state.group("appctx")
    close()
    return found
