"""Run HAProxy in master-worker mode as a child process (`--manage-haproxy`).

The master stays the same process across reloads, so the child's PID is what we watch,
restart when it dies, and signal on shutdown (never by name). Its output is copied to the
agent's stderr and kept in `output` (bounded): on 2.6 that is the only place where HAProxy
says why a reload failed, and on every version why a start failed (`last_exit`).

A master that keeps dying soon after its start (a file descriptor limit too low for the
config, say) is restarted with exponential backoff, not every second: each restart
re-reads a config that may take seconds and hundreds of MiB to load.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from nodeagent.haproxy.loadcpu import stat_fields
from nodeagent.haproxy.masterlog import MasterLog, last_words, pump

log = logging.getLogger(__name__)


STABLE_SECONDS = 10.0  # a master that lived this long was not failing to start
MAX_RESTART_DELAY = 30.0


@dataclass(frozen=True)
class Exit:
    """A master that ended: its PID, exit status, and its own last words (cleaned)."""

    pid: int
    code: object
    words: str

    def reason(self) -> str:
        said = f": {self.words}" if self.words else " without a word"
        return f"HAProxy master pid={self.pid} exited with {self.code}{said}"


class Supervisor:
    """Start, watch and stop one HAProxy master process.

    A master left running by a previous agent (found through the pidfile, its command line
    naming our master socket) is adopted instead of replaced: an agent restart must not
    interrupt traffic.
    """

    def __init__(
        self,
        config: str,
        master_socket: str,
        pidfile: str,
        haproxy_bin: str = "/usr/sbin/haproxy",
        restart_delay: float = 1.0,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self.on_restart = on_restart
        # Called before each start or restart reads `config`: the applier writes a
        # deferred content first (nodeagent/apply/files.py, `ConfigFile`).
        self.before_spawn: Callable[[], None] | None = None
        self.config = config
        self.master_socket = master_socket
        self.pidfile = pidfile
        self.haproxy_bin = haproxy_bin
        self.restart_delay = restart_delay
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self.output = MasterLog()  # what the masters we started wrote (not an adopted one's)
        self._spawned_at = 0.0
        self._spawn_mark = 0  # `output` position at the current master's start
        self._pump: threading.Thread | None = None
        self.delay = restart_delay  # before the next restart: doubles while starts fail
        self._quick_exits = 0  # masters in a row that died within STABLE_SECONDS
        self.last_exit: Exit | None = None  # the latest master that ended

    @property
    def pid(self) -> int | None:
        """PID of the HAProxy master while it runs."""
        return self._pid if self._pid is not None and self._alive() else None

    @property
    def last_pid(self) -> int | None:
        """PID of the latest master started or adopted, alive or not: a master that died
        at once must still be named, for `exited` to say so."""
        return self._pid

    @property
    def started(self) -> bool:
        return self._pid is not None

    def exited(self, pid: int | None) -> Exit | None:
        """How master `pid` ended, once the watcher has seen it end (None while it runs)."""
        last = self.last_exit
        return last if last is not None and pid is not None and last.pid == pid else None

    def _alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        if self._pid is None:
            return False
        # not our child: a zombie left to a non-reaping init counts as dead
        fields = stat_fields(self._pid)
        if not fields:
            return False
        return fields[0] != "Z"

    def _spawn(self) -> None:
        if self.before_spawn is not None:
            self.before_spawn()
        if os.path.exists(self.master_socket):
            os.unlink(self.master_socket)
        argv = [self.haproxy_bin, "-W", "-S", self.master_socket]
        argv += ["-f", self.config, "-p", self.pidfile]
        self._spawn_mark, self._spawned_at = self.output.mark(), time.monotonic()
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._pid = self._proc.pid
        assert self._proc.stdout is not None
        # HAProxy ignores SIGPIPE: if this agent dies, the master outlives the closed pipe.
        self._pump = threading.Thread(
            target=pump,
            args=(self._proc.stdout, self.output),
            name=f"haproxy-output-{self._pid}",
            daemon=True,
        )
        self._pump.start()
        log.info("started haproxy master pid=%d config=%s", self._pid, self.config)

    def _previous_master(self) -> int | None:
        """The master a previous agent left running, if the pidfile names one of ours."""
        try:
            with open(self.pidfile, encoding="ascii") as f:
                pid = int(f.read().split()[0])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            return None
        if os.fsencode(self.master_socket) in argv and b"-W" in argv:
            return pid
        return None

    def would_spawn(self) -> bool:
        """`start()` would spawn a new master on the config (none runs, none to adopt)."""
        with self._lock:
            return self._pid is None and self._previous_master() is None

    def forget_failed_start(self) -> bool:
        """After a start whose master died: stop watching (no restart on the same file) so
        that the next `start()` spawns anew. False, and nothing done, while the master
        still runs (still loading: it is waited for, not replaced)."""
        if self._pid is None or self._alive():
            return False
        self.stop()
        with self._lock:
            if self._pid is not None and self._alive():  # restarted meanwhile: stop() ended it
                return False
            self._pid, self._proc, self._watcher = None, None, None
        return True

    def start(self) -> bool:
        """Start (or adopt) HAProxy once and watch it. True when an existing one was adopted."""
        with self._lock:
            if self._pid is not None:
                return False
            self._stopping.clear()
            adopted = self._previous_master()
            if adopted is not None:
                self._pid = adopted
                log.info("adopted running haproxy master pid=%d", adopted)
            else:
                self._spawn()
            self._watcher = threading.Thread(target=self._watch, name="haproxy-watch", daemon=True)
            self._watcher.start()
            return adopted is not None

    def _wait_exit(self) -> object:
        if self._proc is not None:
            return self._proc.wait()
        while self._alive() and not self._stopping.wait(0.5):
            pass
        return "unknown (adopted)"

    def _record_exit(self, pid: int | None, code: object) -> float:
        """Remember how the master ended, in its words; the delay before the next start
        (doubled while masters die within STABLE_SECONDS, back to the first otherwise)."""
        if self._pump is not None and self._proc is not None:
            self._pump.join(timeout=2.0)  # its last lines, written just before it exited
        words = last_words(self.output.since(self._spawn_mark)) if self._proc else ""
        lived = time.monotonic() - self._spawned_at
        self._quick_exits = 0 if lived >= STABLE_SECONDS else self._quick_exits + 1
        doubled = self.restart_delay * 2 ** min(max(self._quick_exits - 1, 0), 16)
        self.delay = min(doubled, max(MAX_RESTART_DELAY, self.restart_delay))
        self.last_exit = Exit(pid or 0, code, words)
        log.warning(
            "%s after %.1fs; restarting in %.1fs", self.last_exit.reason(), lived, self.delay
        )
        return self.delay

    def _watch(self) -> None:
        while not self._stopping.is_set():
            pid = self._pid
            code = self._wait_exit()
            if self._stopping.is_set():
                return
            if self._stopping.wait(self._record_exit(pid, code)):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                self._spawn()
                if self.on_restart is not None:
                    self.on_restart()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the master (and so its workers) by PID: SIGTERM, then SIGKILL."""
        self._stopping.set()
        with self._lock:
            pid, proc = self._pid, self._proc
        if pid is None:
            return
        if self._alive():
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while self._alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._alive():
                log.warning("haproxy pid=%d ignored SIGTERM; killing", pid)
                os.kill(pid, signal.SIGKILL)
        if proc is not None:
            proc.wait(timeout)
        if self._watcher is not None:
            self._watcher.join(timeout)
        log.info("stopped haproxy master pid=%d", pid)
