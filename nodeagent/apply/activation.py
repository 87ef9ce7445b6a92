"""How HAProxy comes to run a new haproxy.cfg: one strategy per way the agent runs beside it.

- `Managed` (`--manage-haproxy`): the agent's supervisor starts HAProxy (or adopts the
  master a previous agent left running) and reloads it through the master CLI.
- `External` (the default): HAProxy runs in its own container, started by someone else
  from the file the agent writes; the agent reaches it only through its sockets.

The applier (`nodeagent/apply/applier.py`) writes the file and asks the strategy to bring
HAProxy up; a `None` answer means HAProxy was already running and needs a reload. There is
no render-only mode of `nodeagent run`: `nodeagent render` prints a config and touches no
HAProxy.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from nodeagent.haproxy import HAProxyError, sockrepair
from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.loadcpu import tree_cpu_seconds
from nodeagent.haproxy.parse import ProcInfo
from nodeagent.haproxy.supervisor import Supervisor

log = logging.getLogger(__name__)

# A start past its timeout is waited for in windows of this many seconds while its
# process tree keeps using CPU (LOADING_MIN_CPU_S in the window), up to LOADING_MAX_S in
# all: a master loading a big config on a loaded host is not NACKed, a hung one is.
LOADING_WINDOW_S = 5.0
LOADING_MIN_CPU_S = 0.05
LOADING_MAX_S = 120.0


class Activation(Protocol):
    """One way of making HAProxy run the file the applier wrote."""

    @property
    def started(self) -> bool:
        """HAProxy runs a config this agent knows (so a change may be classified against
        it and a deleted runtime socket repaired); False only before a managed start."""
        ...

    def present(self) -> bool:
        """There is an HAProxy to activate now (on agent start: else only write the file)."""
        ...

    def bring_up(self, timeout: float) -> ProcInfo | None:
        """Start HAProxy on the written file if it is not running, and wait for it: its
        `show proc` once up; None when it was running already (a reload is needed)."""
        ...

    def fresh(self, data: bytes) -> bool:
        """`bring_up` of the file `data` would start a new HAProxy on it, or wait for the
        one still starting on these very bytes; none running, none adopted. Such a start
        parses the config as `haproxy -c` does and refuses what it refuses."""
        ...

    def failed_start_ended(self) -> bool:
        """After a `bring_up` that failed: the HAProxy it started is gone and will not be
        restarted on that file (the next `bring_up` starts anew). False when it may still
        be loading, or was not started here."""
        ...


class Managed:
    """The agent's supervisor runs HAProxy (master-worker)."""

    def __init__(self, haproxy: HAProxy, supervisor: Supervisor) -> None:
        self.haproxy = haproxy
        self.supervisor = supervisor
        if haproxy.master_log is None:
            haproxy.master_log = supervisor.output  # 2.6's words for a failed reload
        # The master this agent spawned and has not seen answer yet, and the SHA-256 of
        # the file it was started on: a start that outlasts `timeout` (a config of 8,000
        # backends under load) is waited for by the retry, not reloaded while it loads.
        self._starting: tuple[int, str] | None = None

    @property
    def started(self) -> bool:
        return self.supervisor.started

    def present(self) -> bool:
        return True

    def bring_up(self, timeout: float) -> ProcInfo | None:
        """HAProxyError in HAProxy's own words when the master it started is gone (no
        wait for a socket that will never appear), or is gone and not yet restarted."""
        sup = self.supervisor
        if self._starting is not None and sup.pid == self._starting[0]:
            return self._still_starting(timeout)
        self._starting = None
        if sup.started:
            gone = sup.last_exit
            if gone is None or self.haproxy.is_running():
                return None
            if sup.pid is None or gone.words:  # waiting to restart, or failing to start
                raise HAProxyError(f"HAProxy is not running: {gone.reason()}")
            return None  # restarting after a silent death: the reload says what it finds
        adopted = sup.start()
        pid = sup.last_pid  # not `pid`: a master that died at once is None there
        if not adopted and pid is not None:
            self._starting = (pid, self._config_digest())
        info = self._wait_started(pid, timeout)
        self._starting = None
        return None if adopted else info  # adopted: it runs an older file, reload it

    def fresh(self, data: bytes) -> bool:
        if self.supervisor.would_spawn():
            return True
        starting = self._starting  # a retry while the master loads this same file
        return (
            starting is not None
            and self.supervisor.pid == starting[0]
            and hashlib.sha256(data).hexdigest() == starting[1]
        )

    def failed_start_ended(self) -> bool:
        if not self.supervisor.forget_failed_start():
            return False
        self._starting = None
        return True

    def _still_starting(self, timeout: float) -> ProcInfo | None:
        """The master started by an earlier attempt is alive but has not answered yet:
        wait for it (a reload now would fail on a master that cannot answer, and load the
        config once more); once up, it needs no reload if the file is still the one it
        was started on."""
        assert self._starting is not None
        pid, digest = self._starting
        log.info("haproxy master pid=%d is still starting; waiting for it", pid)
        info = self._wait_started(pid, timeout)
        self._starting = None
        return info if digest and self._config_digest() == digest else None

    def _wait_started(self, pid: int | None, timeout: float) -> ProcInfo:
        """`wait_running` for `timeout`, then on in `LOADING_WINDOW_S` windows while the
        master `pid` (with its children) used CPU in the last window: loading, not hung.
        The last window's HAProxyError when it ends, used none, or `LOADING_MAX_S` pass."""
        ended = self._ended(pid)
        if pid is None:  # nothing of ours to watch load
            return self.haproxy.wait_running(timeout, ended)
        give_up = time.monotonic() + LOADING_MAX_S
        window = timeout
        cpu = tree_cpu_seconds(pid)
        while True:
            try:
                return self.haproxy.wait_running(window, ended)
            except HAProxyError:
                now = tree_cpu_seconds(pid)
                if (
                    cpu is None
                    or now is None
                    or now - cpu < LOADING_MIN_CPU_S
                    or ended() is not None
                    or time.monotonic() >= give_up
                ):
                    raise
                log.info(
                    "haproxy master pid=%s still loading its config (%.2f s of CPU in "
                    "the last %.1f s); waiting",
                    pid,
                    now - cpu,
                    window,
                )
                cpu = now  # the next window's start
                window = min(LOADING_WINDOW_S, max(0.0, give_up - time.monotonic()))

    def _ended(self, pid: int | None) -> Callable[[], str | None]:
        def ended() -> str | None:
            gone = self.supervisor.exited(pid)
            return None if gone is None else f"HAProxy did not start: {gone.reason()}"

        return ended

    def _config_digest(self) -> str:
        """SHA-256 of the config file as it is now ("" when unreadable)."""
        try:
            with open(self.supervisor.config, "rb") as f:
                return hashlib.file_digest(f, "sha256").hexdigest()
        except OSError:
            return ""


class External:
    """HAProxy started by someone else (its own container) from the file the agent writes."""

    def __init__(self, haproxy: HAProxy) -> None:
        self.haproxy = haproxy

    @property
    def started(self) -> bool:
        return True

    def present(self) -> bool:
        return self.haproxy.is_running()

    def bring_up(self, timeout: float) -> ProcInfo | None:
        if self.haproxy.is_running():
            return None
        # Not up yet: its container waits for this file, then starts on it.
        return self.haproxy.wait_running(timeout)

    def fresh(self, data: bytes) -> bool:
        return False  # its container's start is not ours to see fail: check first

    def failed_start_ended(self) -> bool:
        return False


def for_mode(haproxy: HAProxy, supervisor: Supervisor | None) -> Activation:
    """The strategy of an agent that supervises HAProxy (`supervisor`) or not."""
    return External(haproxy) if supervisor is None else Managed(haproxy, supervisor)


def socket_rebinding(haproxy: HAProxy, cfg: str, silent: bool = False) -> str | None:
    """The config to reload with so that a deleted runtime socket is bound again, or
    None when the socket answers (or HAProxy is not up: a start binds it anyway).
    `silent`: this apply already found it silent (`sockrepair.answers`' wait, or the map
    commands' first connection): not asked again, which would wait as long once more."""
    path = haproxy.runtime_socket
    if (not silent and sockrepair.answers(path)) or not haproxy.is_running():
        return None
    rebind = sockrepair.rebinding_config(cfg, path)
    if rebind is None:
        log.error("runtime socket %s is gone and cannot be rebound by a reload", path)
    else:
        log.warning("runtime socket %s is gone: reloading so that HAProxy binds it", path)
    return rebind
