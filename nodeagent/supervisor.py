"""Run HAProxy in master-worker mode as a child process (`--manage-haproxy`).

The master stays the same process across reloads, so the child's PID is what we watch,
restart when it dies, and signal on shutdown (never by name).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading

log = logging.getLogger(__name__)


class Supervisor:
    """Start, watch and stop one HAProxy master process."""

    def __init__(
        self,
        config: str,
        master_socket: str,
        pidfile: str,
        haproxy_bin: str = "/usr/sbin/haproxy",
        restart_delay: float = 1.0,
    ) -> None:
        self.config = config
        self.master_socket = master_socket
        self.pidfile = pidfile
        self.haproxy_bin = haproxy_bin
        self.restart_delay = restart_delay
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    @property
    def started(self) -> bool:
        return self._proc is not None

    def _spawn(self) -> None:
        if os.path.exists(self.master_socket):
            os.unlink(self.master_socket)
        argv = [self.haproxy_bin, "-W", "-S", self.master_socket]
        argv += ["-f", self.config, "-p", self.pidfile]
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        log.info("started haproxy master pid=%d config=%s", self._proc.pid, self.config)

    def start(self) -> None:
        """Start HAProxy once and watch it; later calls do nothing."""
        with self._lock:
            if self._proc is not None:
                return
            self._stopping.clear()
            self._spawn()
            self._watcher = threading.Thread(target=self._watch, name="haproxy-watch", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.wait(self.restart_delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                log.warning("haproxy master pid=%d exited with %s; restarting", proc.pid, code)
                self._spawn()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the master (and so its workers) by PID: SIGTERM, then SIGKILL."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("haproxy pid=%d ignored SIGTERM; killing", proc.pid)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
        if self._watcher is not None:
            self._watcher.join(timeout)
        log.info("stopped haproxy master pid=%d", proc.pid)
