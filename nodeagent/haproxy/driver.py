"""The HAProxy edge: validation, master CLI, runtime API (the replies are read in `parse.py`).

HAProxy 2.6 answers some commands with nothing (`reload`) or with a sentence even on
failure (`set server ... addr`), so every action here is confirmed by reading state back
(`show proc`, `show servers state`, `show peers`) instead of trusting the reply. From 2.7
`reload` answers `Success=1|0` and the startup log: a failure is reported in those words.
What differs between 2.6, 3.0 and 3.2 is in docs/design.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable

from nodeagent.haproxy import HAProxyError, sockrepair
from nodeagent.haproxy.commands import MapUpdate, ServerUpdate
from nodeagent.haproxy.masterlog import MasterLog, failure_reason
from nodeagent.haproxy.parse import (
    ProcInfo,
    ServerState,
    parse_backend_sessions,
    parse_info_pid,
    parse_peer_sessions,
    parse_peers_flags,
    parse_reload_reply,
    parse_servers_state,
    parse_show_proc,
    parse_table_usage,
    stored_entries,
)
from peerplane.addresses import AddressError, canonical_address

log = logging.getLogger(__name__)

# What a map command may carry: the route vocabulary's characters (peerplane/patterns.py),
# no space, quote, backslash or `#`; a `;` (paths may hold one) is escaped as `\;`, which
# the CLI reads as a plain character (verified on 2.6, 3.0 and 3.2).
_MAP_WORD = re.compile(r"[A-Za-z0-9._~%/+,;=:@!*?&-]{1,2300}")
_MAP_PATH = re.compile(r"/[A-Za-z0-9_./-]{1,250}")
_MAP_OPS = frozenset({"add", "set", "del"})
MAP_COMMANDS_PER_CONNECTION = 100
# A map command's reply (nothing, or a refusal) is immediate on an idle HAProxy, late on a
# busy one: a socket that has not answered within `sockrepair.answers`' own wait is stuck.
MAP_REPLY_TIMEOUT = sockrepair.ANSWER_TIMEOUT_S

# After a reload, the new worker's peer sessions must hold this long unchanged before the
# reload counts as applied: two workers that connect to each other at the same moment
# (both instances reloaded together) each kill one session and may keep the other a few
# milliseconds before it dies too (docs/design.md, "Stick tables across a reload").
PEER_SESSIONS_SETTLE_S = 0.2

# The master CLI refuses connections for a few milliseconds after a start and after each
# reload, while the master re-executes itself (about one `show proc` in ten during
# back-to-back reloads, all three series): the question before a reload is asked again
# within this bound instead of failing the reload.
MASTER_ANSWER_WAIT_S = 2.0

# 2.6 drops a peers section without the local peer with only this warning.
_DROPPED_PEERS = re.compile(r"Removing incomplete section 'peers [^']*'")


def command(path: str, cmd: str, timeout: float = 5.0) -> str:
    """Send one command to a UNIX CLI socket and read the whole reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(cmd.encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        chunks: list[bytes] = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def validate(
    cfg_text: str, haproxy_bin: str = "/usr/sbin/haproxy", timeout: float = 15.0
) -> str | None:
    """Run `haproxy -c` on the text; None when valid, else HAProxy's own messages.

    The check runs in its own process group, killed as a whole on timeout (a wrapper
    script's children must not outlive it or hold its pipes open). OSError when it cannot
    run at all (no temp dir, no descriptors left, no binary), TimeoutError (an OSError)
    when it did not finish within `timeout`: a fault of the host that may pass, not a
    verdict on the config.
    """
    with tempfile.TemporaryDirectory(prefix="nodeagent-check-") as tmp:
        path = os.path.join(tmp, "haproxy.cfg")
        with open(path, "w", encoding="utf-8") as f:
            f.write(cfg_text)
        proc = subprocess.Popen(
            [haproxy_bin, "-c", "-f", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",  # its output is quoted, never parsed as UTF-8 strictly
            start_new_session=True,
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            # No verdict on the config: a loaded host (a config of 8,000 backends took
            # over 15 s beside another agent's check) may pass it on a retry.
            raise TimeoutError(f"haproxy -c timed out after {timeout:g}s") from None
    output = output.replace(path, "haproxy.cfg")
    relevant = [ln.strip() for ln in output.splitlines() if "[ALERT]" in ln or "[WARNING]" in ln]
    if proc.returncode != 0:
        return "\n".join(relevant) or output.strip() or f"haproxy -c exited {proc.returncode}"
    dropped = [ln for ln in relevant if _DROPPED_PEERS.search(ln)]
    if dropped:
        return "\n".join(dropped)
    return None


class HAProxy:
    """Drive one running HAProxy through its master CLI and runtime sockets."""

    def __init__(
        self,
        master_socket: str,
        runtime_socket: str,
        haproxy_bin: str = "/usr/sbin/haproxy",
        sync_wait: float = 15.0,
        reload_timeout: float = 15.0,
        check_timeout: float = 15.0,
        master_log: MasterLog | None = None,
        confirm_wait: float = 1.0,
    ) -> None:
        self.check_timeout = check_timeout
        # The master's output when the agent started it: 2.6's only account of a failed
        # reload. None for an HAProxy started by someone else (or adopted).
        self.master_log = master_log
        self.master_socket = master_socket
        self.runtime_socket = runtime_socket
        self.haproxy_bin = haproxy_bin
        self.sync_wait = sync_wait
        self.reload_timeout = reload_timeout
        self.confirm_wait = confirm_wait
        self._lock = threading.Lock()

    def master(self, cmd: str) -> str:
        return command(self.master_socket, cmd)

    def runtime(self, cmd: str) -> str:
        return command(self.runtime_socket, cmd)

    def show_proc(self) -> ProcInfo:
        return parse_show_proc(self.master("show proc"))

    def show_proc_answered(self, timeout: float = MASTER_ANSWER_WAIT_S) -> ProcInfo:
        """`show proc`, asked again while the master refuses connections (it re-executes
        itself after a start or a reload), for at most `timeout`; then the last OSError."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.show_proc()
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def _answers_as(self, worker: int) -> bool:
        """Whether `worker` answers the runtime socket (not a leftover file, not a
        worker still loading)."""
        try:
            return parse_info_pid(command(self.runtime_socket, "show info", 1.0)) == worker
        except OSError:
            return False

    def is_running(self) -> bool:
        try:
            return self.show_proc().current_worker is not None
        except (OSError, HAProxyError):
            return False

    def wait_running(
        self, timeout: float, ended: Callable[[], str | None] | None = None
    ) -> ProcInfo:
        """Wait until the master answers and has a current worker that answers the
        runtime socket as itself (`show info`); `ended` says why the master is gone (its
        own words), which ends the wait at once. The socket file alone proves nothing: a
        stopped HAProxy leaves it behind, and a 3.1+ master lists its worker while that
        worker still loads the config it may refuse."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            why = ended() if ended is not None else None
            if why is not None:
                raise HAProxyError(why)
            try:
                info = self.show_proc()
                if info.current_worker is not None and self._answers_as(info.current_worker):
                    return info
            except (OSError, HAProxyError) as e:
                last = e
            time.sleep(0.05)
        if isinstance(last, (FileNotFoundError, ConnectionRefusedError)):
            # Started by someone else, it said why only on its own output: point there,
            # not at an errno of a socket that was never made.
            raise HAProxyError(
                f"HAProxy not running after {timeout}s: no master answers on "
                f"{self.master_socket} ({last.strerror}); HAProxy's own words are in its log "
                f"(the haproxy container's: kubectl logs -c haproxy)"
            )
        raise HAProxyError(f"HAProxy not running after {timeout}s: {last}")

    def peers_sections(self) -> dict[str, int]:
        """Section name -> flags of the running worker's peers sections."""
        return parse_peers_flags(self.runtime("show peers"))

    def peers_synced(self) -> bool:
        flags = parse_peers_flags(self.runtime("show peers"))
        return all(f & 0x3 == 0x3 for f in flags.values())

    def wait_peers_synced(self) -> None:
        """Before a reload: let the running worker's resync finish (bounded), or the new
        worker learns an incomplete table. Checked before every reload, the first one
        after a start included: a fresh worker is as unsynced as a reloaded one. A peers
        section whose peers are gone reports synced once HAProxy's own resync timeouts
        pass (about 5 s local, then 5 s remote, from the worker's start), so the wait stays
        bounded by `sync_wait` either way. Measured on 3.0 and 3.2: a worker reloaded
        before its own resync finished never hands its tables to the new worker (2.6 does,
        5 s later); see docs/design.md, "HAProxy facts the agent relies on, by version"."""
        deadline = time.monotonic() + self.sync_wait
        while time.monotonic() < deadline:
            try:
                if self.peers_synced():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        log.warning(
            "peers resync unfinished after %.1fs; reloading anyway: the new worker may start "
            "without the stick tables",
            self.sync_wait,
        )

    def reload(self, repairing: bool = False) -> ProcInfo:
        """Hitless reload via the master CLI, confirmed by a new worker in `show proc`.

        A failed reload raises HAProxyError in HAProxy's own words: the `reload` reply's
        startup log (2.7+), or on 2.6, whose master answers nothing and re-executes, the
        ALERTs it wrote to its output (`master_log`). `repairing`: the runtime socket is
        gone or does not answer (this reload binds it again), so the running worker's
        resync and tables are not asked for: each question would only wait its timeout."""
        with self._lock:
            tables: dict[str, int] = {}
            peers: set[str] = set()
            if not repairing:
                self.wait_peers_synced()
                tables = self._table_usage()
                peers = self._connected_peers()
            before = self.show_proc_answered()
            old_pids = {pid for pid, _ in before.workers}
            mark = self.master_log.mark() if self.master_log is not None else 0
            reply = ""
            try:  # 2.7+ answers once the new worker is up or has failed
                reply = command(self.master_socket, "reload", self.reload_timeout)
            except OSError as e:
                log.debug("master closed during reload: %s", e)
            answer = parse_reload_reply(reply)
            if answer is not None and not answer.ok:
                reason = failure_reason(list(answer.log)) or " ".join(answer.log).strip()
                raise HAProxyError(f"HAProxy says: {reason or 'Success=0'}")
            deadline = time.monotonic() + self.reload_timeout
            while time.monotonic() < deadline:
                time.sleep(0.05)
                try:
                    info = self.show_proc()
                except (OSError, HAProxyError):
                    continue  # the master re-executes itself
                if info.failed_reloads > before.failed_reloads:
                    raise HAProxyError(self._failure_words(mark))
                worker = info.current_worker
                if info.reloads > before.reloads and worker is not None and worker not in old_pids:
                    self.wait_table_handover(worker, tables, peers)
                    return info
            raise HAProxyError(f"no new HAProxy worker after {self.reload_timeout}s")

    def _table_usage(self) -> dict[str, int]:
        """Entries per table the new worker must reach: `used` less what requests in
        flight hold unstored (`parse.stored_entries`), else a reload under traffic would
        wait out `sync_wait` for entries that never exist."""
        try:
            before = parse_backend_sessions(self.runtime("show stat -1 2 -1"))
            used = parse_table_usage(self.runtime("show table"))
            after = parse_backend_sessions(self.runtime("show stat -1 2 -1"))
        except OSError:
            return {}
        return stored_entries(used, before, after)

    def _connected_peers(self) -> set[str]:
        """The remote peers the running worker has a session with (before a reload)."""
        try:
            sessions = parse_peer_sessions(self.runtime("show peers"))
        except OSError:
            return set()
        return {p.name for p in sessions if p.established}

    def wait_table_handover(
        self, worker: int, before: dict[str, int], peers: set[str] | None = None
    ) -> None:
        """After a reload: the old worker pushes its stick tables to the new one over the
        local peer connection while the new one already serves; a client arriving before
        its entry would be balanced afresh. Wait (bounded by `sync_wait`) until the new
        worker holds at least as many entries as the old one had in every table both
        configs keep, says the old worker's lesson is over, and has a session, unchanged
        for `PEER_SESSIONS_SETTLE_S`, with every remote peer in `peers` (those the old
        worker was connected to) that its config still names (`_settled`), so the reload
        counts as applied only once the tables came along and updates flow to the peers.
        `show info` in the same connection says which worker answered (both listen on the
        runtime socket for a moment), and the wait also makes sure that runtime commands
        after this reload reach the new worker, not the leaving one."""
        if not os.path.exists(self.runtime_socket):
            return  # nothing to ask (socket repair handles a lost socket)
        deadline = time.monotonic() + self.sync_wait
        usage: dict[str, int] = {}
        settled: tuple[float, tuple[tuple[str, str], ...]] | None = None  # since, sessions
        missing: set[str] = set()
        while time.monotonic() < deadline:
            try:
                reply = self.runtime("show info;show table")
            except OSError:
                reply = ""
            if parse_info_pid(reply) == worker:
                usage = parse_table_usage(reply)
                arrived = all(usage.get(name, count) >= count for name, count in before.items())
                sessions, missing = (
                    self._settled(worker, peers or set()) if arrived else (None, missing)
                )
                if sessions is None:
                    settled = None
                elif settled is None or settled[1] != sessions:
                    settled = (time.monotonic(), sessions)
                    if not sessions:
                        return  # no peer session to watch: nothing can still change
                elif time.monotonic() - settled[0] >= PEER_SESSIONS_SETTLE_S:
                    return
            time.sleep(0.05)
        log.warning(
            "new worker %d lacks stick-table entries, the old worker's lesson or a session "
            "with peers %s %.1fs after the reload: %s of %s",
            worker,
            sorted(missing),
            self.sync_wait,
            usage,
            before,
        )

    def _settled(
        self, worker: int, peers: set[str]
    ) -> tuple[tuple[tuple[str, str], ...] | None, set[str]]:
        """The new worker's sessions with `peers` ((name, session) pairs) once its lesson
        from the old worker is over (`show peers` flags 0x1 in every section) and every one
        of them its config still names is connected, else None; and those not connected.

        The entry count alone can be reached from the remote peers' pushes while the old
        worker is still teaching; until it finished, the old worker may still send entries
        as they were before the reload. And until the new worker's session with a peer is
        up, neither side sends the other what its clients changed: when it comes up, what
        the peer sends first overwrites the entries changed here, which are then sent back
        as they are now, so a client pinned again here in the meantime (its pod gone) gets
        the peer's older server back on both instances (CI 3.2.26, seed 263481; a
        collision of both new workers' connections leaves them without a session for up
        to 2 s). Asked only once the count is there, in one connection with `show info` so
        that the new worker answers."""
        try:
            reply = self.runtime("show info;show peers")
        except OSError:
            return None, set()
        if parse_info_pid(reply) != worker:
            return None, set()
        named = {p.name: p for p in parse_peer_sessions(reply) if p.name in peers}
        down = {name for name, p in named.items() if not p.established}
        if down or not all(flags & 0x1 for flags in parse_peers_flags(reply).values()):
            return None, down
        return tuple(sorted((name, p.session) for name, p in named.items())), down

    def _failure_words(self, mark: int) -> str:
        """Why the 2.6 master says its reload failed, from its output since `mark`."""
        if self.master_log is None:
            return "HAProxy's failed-reload counter grew (its words are in its own log)"
        # The ALERTs precede the master's re-exec; give the output pipe a moment to catch up.
        lines = self.master_log.wait_for(mark, "Loading failure", 2.0)
        reason = failure_reason(lines)
        return f"HAProxy says: {reason}" if reason else "HAProxy's failed-reload counter grew"

    def servers_state(self, backend: str) -> dict[str, ServerState]:
        return parse_servers_state(self.runtime(f"show servers state {backend}"))

    def _failed_checks(self, updates: list[ServerUpdate]) -> set[tuple[str, str]]:
        """(backend, server) of the enabled slots to update that checks marked DOWN."""
        failed: set[tuple[str, str]] = set()
        for backend in sorted({u.backend for u in updates if u.enabled}):
            for name, state in self.servers_state(backend).items():
                if state.enabled and state.down:
                    failed.add((backend, name))
        return failed

    def set_servers(self, updates: Iterable[ServerUpdate]) -> None:
        """Apply slot changes with `set server`, then confirm with `show servers state`."""
        updates = list(updates)
        # Every address checked before the first command: a refused one changes nothing.
        # Only the canonicaliser's output reaches the socket: a command is a line of text,
        # and HAProxy runs whatever follows a `;` or a newline as further commands.
        addresses = {(u.backend, u.server): _canonical(u.address) for u in updates if u.enabled}
        failed = self._failed_checks(updates)
        for u in updates:
            target = f"{u.backend}/{u.server}"
            if u.enabled:
                if (u.backend, u.server) in failed:
                    # Its old pod failed its checks: with `addr` alone the slot would stay
                    # DOWN until `rise` checks pass; leaving maintenance starts it UP and
                    # checks it at once. A slot that is UP moves without this (no moment
                    # without a server), a free one is in maintenance already.
                    reply = self.runtime(f"set server {target} state maint").strip()
                    if reply:
                        raise HAProxyError(f"set server {target} state maint: {reply}")
                addr = addresses[(u.backend, u.server)]
                reply = self.runtime(f"set server {target} addr {addr} port {u.port}").strip()
                if "changed" not in reply and "no need to change" not in reply:
                    raise HAProxyError(f"set server {target} addr: {reply or 'no reply'}")
            state = "ready" if u.enabled else "maint"
            reply = self.runtime(f"set server {target} state {state}").strip()
            if reply:
                raise HAProxyError(f"set server {target} state {state}: {reply}")
        # HAProxy 3.0+ may print the old address for a few ms after "IP changed" (about
        # one update in a hundred, measured): re-read, bounded, before calling it refused.
        deadline = time.monotonic() + self.confirm_wait
        while (missing := self._unconfirmed(updates, addresses)) is not None:
            if time.monotonic() > deadline:
                raise HAProxyError(missing)
            time.sleep(0.01)

    def set_maps(self, updates: Iterable[MapUpdate]) -> None:
        """Route map changes through the runtime API, in order, many commands per
        connection (`;`-separated); every command is built and checked before the first is
        sent. HAProxy answers each of them with nothing on success: any text is its refusal,
        and an HAProxyError (the applier reloads instead, with the map files written).
        A socket that cannot be reached or does not answer the first connection within
        `MAP_REPLY_TIMEOUT` raises `Unanswered`: the first connection is the probe of
        `sockrepair.answers`, one round trip less per change (the applier reloads from
        the files, whether a slow HAProxy ran the commands or not)."""
        commands = [map_command(u) for u in updates]
        for start in range(0, len(commands), MAP_COMMANDS_PER_CONNECTION):
            batch = ";".join(commands[start : start + MAP_COMMANDS_PER_CONNECTION])
            try:
                reply = command(self.runtime_socket, batch, MAP_REPLY_TIMEOUT).strip()
            except OSError as e:
                if start == 0:
                    raise Unanswered(f"{self.runtime_socket}: {e}") from e
                raise
            if reply:
                raise HAProxyError(f"map update refused: {reply[:300]}")

    def _unconfirmed(
        self, updates: list[ServerUpdate], addresses: dict[tuple[str, str], str]
    ) -> str | None:
        """The first update `show servers state` does not show applied, as an error text."""
        for backend in sorted({u.backend for u in updates}):
            actual = self.servers_state(backend)
            for u in (u for u in updates if u.backend == backend):
                got = actual.get(u.server)
                if got is None or got.enabled != u.enabled:
                    return f"{backend}/{u.server} not confirmed: {got}"
                want = (addresses[(backend, u.server)], u.port) if u.enabled else None
                if want is not None and (_readback(got.address), got.port) != want:
                    return f"{backend}/{u.server} not confirmed: {got}"
        return None


class Unanswered(HAProxyError):
    """The runtime socket could not be reached, or did not answer the first commands of
    an update in time: stuck or gone, as `sockrepair.answers` judges it."""


def map_command(update: MapUpdate) -> str:
    """The runtime API command of one map update, every word checked first."""
    if update.op not in _MAP_OPS or not _MAP_PATH.fullmatch(update.path):
        raise HAProxyError(f"refusing map update {update.op!r} of {update.path!r}")
    words = [update.key] if update.op == "del" else [update.key, update.value]
    for word in words:
        if not _MAP_WORD.fullmatch(word):
            raise HAProxyError(f"refusing map entry {word[:80]!r}")
    text = " ".join(w.replace(";", "\\;") for w in words)
    return f"{update.op} map {update.path} {text}"


def _canonical(address: str) -> str:
    try:
        return canonical_address(address)
    except AddressError as e:
        raise HAProxyError(f"refusing server address: {e}") from None


def _readback(address: str) -> str | None:
    """HAProxy's own text for an address (inet_ntop: `::10.0.0.1` for `::a00:1`), made
    comparable; None when it is not an address at all."""
    try:
        return canonical_address(address)
    except AddressError:
        return None
