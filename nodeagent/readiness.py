"""Is this HAProxy instance ready for traffic: does it hold the fleet's stick tables?

A fresh worker serves at once but learns the peers' tables only once its resync finishes
(`show peers` flags & 0x3 == 0x3; two instances starting together: 5.9 s on 2.6, 6.6 s
on 3.0, 7.7 s on 3.2);
a client routed to it before that is balanced without its entry. `/readyz` (the agent's
readiness probe) says 200 only once (a) HAProxy runs an applied snapshot and answers, and
(b) every peers section reports its resync done, or the snapshot names no other peer, or
`bound` seconds (`--sync-wait`) passed since the worker started: HAProxy's own resync
timeouts settle the flags anyway (measured: about 5 s after start when every peer is
gone; within 0.1 s beside a synced peer), the bound covers what was not measured.

Once ready, it stays ready for as long as the same HAProxy master runs: a reload's new
worker takes the table from the old one over the local peer connection (0.05-0.25 s, and
the agent's reload returns only after that handover), so a reload, a peer joining (a
peers change reloads every instance) included, never flips readiness off, nor does the
master CLI refusing connections while it re-executes itself for the reload. A restarted
HAProxy (another master, or the same pid started again later) starts over.

`decide` is the pure decision; `Readiness` observes HAProxy (`show proc`, and `show peers`
until ready; 1 s socket timeouts; cached `cache_for` seconds, so a probe every 2 s costs
one observation) and keeps the latch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.haproxy import HAProxyError
from nodeagent.haproxy.driver import command
from nodeagent.haproxy.parse import parse_peers_flags, parse_uptimes
from nodeagent.held import Held
from nodeagent.metrics import AgentMetrics

log = logging.getLogger(__name__)

RESYNC_DONE = 0x3  # PEERS_F_RESYNC_LOCAL | PEERS_F_RESYNC_REMOTE
SAME_START = 2.5  # seconds: `show proc` uptimes have 1 s resolution


@dataclass(frozen=True)
class Observation:
    """What HAProxy said: its master, its serving worker, their ages and the peers flags
    (None when `show peers` was not asked)."""

    master: int
    master_age: float
    worker: int | None
    worker_age: float
    sections: Mapping[str, int] | None


@dataclass(frozen=True)
class Verdict:
    ready: bool
    reason: str
    by_bound: bool = False


def held_state(applied: Held | None, pod_name: str) -> tuple[bool, bool]:
    """(a snapshot is applied, it names a peer besides this pod): a section with only the
    local peer has nobody to learn a table from."""
    if applied is None:
        return False, False
    peers = applied.peers.peers if applied.peers is not None else ()
    return True, any(p.name != pod_name for p in peers)


def decide(
    applied: bool, peered: bool, seen: Observation | str, bound: float, latched: bool
) -> Verdict:
    """The readiness of one instance. `seen` is HAProxy's answer or why there is none;
    `latched`: this same master was ready before (its reloads keep the tables)."""
    if not applied:
        return Verdict(False, "no snapshot applied")
    if isinstance(seen, str):
        return Verdict(False, f"HAProxy does not answer: {seen}")
    if seen.worker is None:
        return Verdict(False, "HAProxy has no worker")
    if latched:
        return Verdict(True, "ready: tables synced (reloads hand them to the new worker)")
    if not peered:
        return Verdict(True, "ready: no peers to learn stick tables from")
    flags = dict(seen.sections or {})
    if flags and all(f & RESYNC_DONE == RESYNC_DONE for f in flags.values()):
        return Verdict(True, "ready: peers resync done")
    described = ", ".join(f"{name} flags=0x{f:x}" for name, f in sorted(flags.items()))
    if seen.worker_age >= bound:
        return Verdict(
            True,
            f"ready by the bound: peers resync unfinished ({described or 'no peers section'}) "
            f"{seen.worker_age:.0f}s after the worker started (bound {bound:g}s)",
            by_bound=True,
        )
    return Verdict(
        False,
        f"peers resync unfinished ({described or 'no peers section'}); worker up "
        f"{seen.worker_age:.0f}s of the {bound:g}s bound",
    )


class Readiness:
    """`/readyz` and `nodeagent_ready` of one agent. `applied` says whether the applier
    holds an applied snapshot and whether it names a peer besides this pod."""

    def __init__(
        self,
        applied: Callable[[], tuple[bool, bool]],
        master_socket: str,
        runtime_socket: str,
        bound: float,
        metrics: AgentMetrics | None = None,
        cache_for: float = 1.0,
        timeout: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._applied = applied
        self._master = master_socket
        self._runtime = runtime_socket
        self.bound = bound
        self.cache_for = cache_for
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        # (when, (applied, peered) then, what was seen): a new applied state asks again
        self._cached: tuple[float, tuple[bool, bool], Observation | str] | None = None
        self._latch: tuple[int, float] | None = None  # (master pid, start estimate)
        self._good: tuple[float, Observation] | None = None  # the last answer, and when
        self._last: Verdict | None = None
        if metrics is not None:
            metrics.ready.set_function(lambda: 1.0 if self.check().ready else 0.0)

    def probe(self) -> tuple[bool, str]:
        """For the HTTP server: ready, and the reason (the 503 body)."""
        verdict = self.check()
        return verdict.ready, verdict.reason

    def check(self) -> Verdict:
        with self._lock:
            applied, peered = self._applied()
            now = self._clock()
            seen = self._observe(now, (applied, peered)) if applied else "not asked"
            latched = isinstance(seen, Observation) and self._is_latched(
                seen.master, seen.master_age, now
            )
            verdict = decide(applied, peered, seen, self.bound, latched)
            if verdict.ready and isinstance(seen, Observation) and not latched:
                self._latch = (seen.master, now - seen.master_age)
                if verdict.by_bound:
                    log.warning("%s", verdict.reason)
            if self._last is None or verdict.ready != self._last.ready:
                log.info("%s: %s", "ready" if verdict.ready else "not ready", verdict.reason)
            self._last = verdict
            return verdict

    def _is_latched(self, master: int, master_age: float, now: float) -> bool:
        """The same master as when readiness was first given: pid and start time (a
        restarted container's master may get the same pid again)."""
        if self._latch is None:
            return False
        pid, start = self._latch
        return pid == master and abs((now - master_age) - start) <= SAME_START

    def _observe(self, now: float, held: tuple[bool, bool]) -> Observation | str:
        """HAProxy's answer (or the error), asked at most once per `cache_for` seconds
        for one applied state; `show peers` only while it can still matter."""
        cached = self._cached
        if cached is not None and now - cached[0] < self.cache_for and cached[1] == held:
            return cached[2]
        peered = held[1]
        try:
            master, master_age, worker, worker_age = parse_uptimes(
                command(self._master, "show proc", self.timeout)
            )
            sections = None
            if peered and worker is not None and not self._is_latched(master, master_age, now):
                sections = parse_peers_flags(command(self._runtime, "show peers", self.timeout))
            answer = Observation(master, master_age, worker, worker_age, sections)
            self._good = (now, answer)
            seen: Observation | str = answer
        except (OSError, HAProxyError) as e:
            seen = self._still_serving(now) or str(e) or type(e).__name__
        self._cached = (now, held, seen)
        return seen

    def _still_serving(self, now: float) -> Observation | None:
        """The master CLI refuses connections for a few milliseconds while the master
        re-executes itself on every reload (measured on 2.6, 3.0 and 3.2: about one `show
        proc` in ten during back-to-back reloads). For a latched master whose worker still
        answers the runtime socket, the last answer stands (aged): a reload must not take
        a serving instance out of its Services."""
        if self._good is None:
            return None
        when, good = self._good
        aged = now - when
        if not self._is_latched(good.master, good.master_age + aged, now):
            return None
        try:
            command(self._runtime, "show info", self.timeout)
        except OSError:
            return None
        return Observation(
            good.master, good.master_age + aged, good.worker, good.worker_age + aged, None
        )
