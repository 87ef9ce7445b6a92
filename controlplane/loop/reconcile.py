"""The reconcile loop: source changes -> debounced compute -> persist slots -> publish.

Sources call `on_change` from their own threads, often in bursts (a rollout touches
hundreds of objects). A lone change (the only one since the last computation started) is
computed at once, even right after a computation: one route or endpoint change, or one
atomic file write (the folder source notifies once, when the state changed), reaches the
agents without waiting; so is a change finding the loop idle for ~100 ms. A lone change
following the last change computed at once by less than the stream gap (~25 ms or twice
the last step's time: computing each change of a steady stream would keep the loop busy
more than about half the time) waits until that gap has passed, then is computed if no
other change came meanwhile. Several changes since the last computation started are a
burst and are coalesced: the loop waits for ~100 ms of quiet, but never more than ~1 s
after the first unhandled change, then computes once (in a worker thread: compute is pure but may be
heavy). The new slot assignment is persisted *before* the snapshots that use it are
published, so a control plane that restarts or fails over continues exactly the slots
agents already run.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Protocol

from controlplane.ledger.store import LedgerWriteError, SlotLedger
from controlplane.logformat import fields
from controlplane.loop.assignment import same_assignment, written_part
from controlplane.loop.heap import Heap, built_without_collector
from controlplane.metrics import Metrics
from controlplane.model import ClusterState
from controlplane.publish.encode import Encoder
from controlplane.publish.store import SnapshotStore
from controlplane.source import Source

if TYPE_CHECKING:
    from controlplane.publish.content import SnapshotContent
    from controlplane.snapshot import ComputeResult, RejectedInput, SlotAssignment

log = logging.getLogger(__name__)

Computed = tuple["ClusterState", "ComputeResult", "dict[str, SnapshotContent]", "Exception | None"]
"""A step's state, result, encoded contents, and the save's error (None: saved or no save)."""

# A timed recomputation runs this long after the instant (a certificate's notAfter has a
# one-second resolution), at most this far ahead (a clock set forward is noticed in a day).
WAKE_MARGIN_S = 1.0
MAX_WAKE_S = 86400.0
# A lone change is part of a stream (debounced) when it follows the last change computed at
# once by less than `quiet_s` / this, or than twice the last step's time.
STREAM_SHARE = 4


class ComputeFn(Protocol):
    """`Computer.compute`'s shape: `now` is the wall clock the loop reads for it;
    `assign_new=False` (a follower's computation) is passed only with a SlotAuthority."""

    def __call__(
        self, state: ClusterState, previous: SlotAssignment, *, now: float, assign_new: bool = True
    ) -> ComputeResult: ...


class SlotAuthority(Protocol):
    """With several replicas: whether this one assigns slots now (holds the Lease), and
    the ledger the leader last wrote, which a follower computes with (None until read);
    `retain` is told which backends the last computation used."""

    def assigning(self) -> bool: ...

    def ledger(self) -> SlotAssignment | None: ...

    def retain(self, in_use: Collection[str]) -> None: ...


def describe_rejection(rejection: RejectedInput) -> str:
    return f"rejected {rejection.object} {rejection.key}={rejection.value}: {rejection.reason}"


class Reconciler:
    """Runs the loop on the event loop it was created on; `on_change` is thread-safe."""

    def __init__(
        self,
        source: Source,
        store: SnapshotStore,
        ledger: SlotLedger,
        compute: ComputeFn,
        *,
        quiet_s: float = 0.1,
        max_delay_s: float = 1.0,
        retry_s: float = 1.0,
        retry_max_s: float = 30.0,
        executor: Executor | None = None,
        metrics: Metrics | None = None,
        authority: SlotAuthority | None = None,
        on_published: Callable[[], None] | None = None,
        prepare: Callable[[], None] | None = None,
        prepare_pending: Callable[[], bool] | None = None,
    ) -> None:
        """Without `authority` (one process) this loop always assigns slots; with it,
        only while `authority.assigning()`: it then continues the ledger it loads on
        promotion, and otherwise computes as a follower, saving nothing. `on_published`
        is called after each step's publication was handed to the streams (the route
        status writer starts then, not beside the encoding). `prepare` (`Computer.prepare`)
        runs in the executor after each publication: what the next computation would
        otherwise start with, kept out of the time from a change to its publication;
        `prepare_pending` (`Computer.prepare_pending`) says whether it has work: without
        any (an endpoint change) the step makes no hop to the executor for it."""
        self._source = source
        self._authority = authority
        self._leading = False  # the ledger was loaded since this replica took the Lease
        self._store = store
        self._ledger = ledger
        self._compute = compute
        # Used by one step at a time (in the executor): keeps unchanged backends' bytes.
        self._encoder = Encoder()
        self._quiet_s = quiet_s
        self._max_delay_s = max_delay_s
        self._retry_s = retry_s
        self._retry_max_s = retry_max_s
        self._failures = 0  # ledger loads or saves failed in a row (backoff)
        self._said: set[str] = set()  # ledger failure causes logged since the last success
        # Why the last ledger write failed, "" when it did not (replica readiness).
        self.unpersisted = ""
        self._executor = executor
        self._on_published = on_published
        self._prepare = prepare
        self._prepare_pending = prepare_pending
        self._metrics = metrics or Metrics()
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._done = asyncio.Condition()
        self._first_change: float | None = None
        self._seen_at: float | None = None  # the same instant, time.monotonic (convergence)
        self._last_change = 0.0
        self._idle_since = -math.inf  # when the last computation finished (loop time)
        self._prompt_at = -math.inf  # when the last change computed at once was (loop time)
        self._step_s = 0.0  # how long the last computation took, persist and publish included
        self._wake: asyncio.TimerHandle | None = None  # `_wake_at`'s timer
        self._scheduled = False  # a _mark call is queued on the loop (coalesces bursts)
        self._pending = 0  # on_change calls since the last computation started (bursts)
        self._lock = threading.Lock()
        self._assignment: SlotAssignment = {}
        self._logged_rejections: set[RejectedInput] = set()
        self._logged_source_errors: set[str] = set()
        self.computations = 0  # computations started, for tests and metrics
        self._heap = Heap()  # frozen after the steps that built it (heap.py)
        # Workload -> endpoints left out for want of a slot, as last published.
        self.waiting: Mapping[str, int] = {}
        self._finished = 0

    # ------------------------------------------------------------------ inputs

    def on_change(self) -> None:
        """Called by the source, from any thread: schedule a debounced recompute."""
        with self._lock:
            self._pending += 1
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._mark)
        except RuntimeError:  # the loop is closed: we are shutting down
            log.debug("change after shutdown ignored")

    def _mark(self) -> None:
        with self._lock:
            self._scheduled = False
        now = self._loop.time()
        if self._first_change is None:
            self._first_change = now
            self._seen_at = time.monotonic()
        self._last_change = now
        self._changed.set()

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Load the saved assignment, compute at once, then on every (debounced) change.

        Returns after `stop()`, never in the middle of a persist-then-publish step. With
        an authority the assignment is loaded when this replica starts assigning.
        """
        with built_without_collector():  # the first step builds most of the heap
            if self._authority is None:
                self._assignment = await self._load()
            await self._reconcile()
        while not self._stopping.is_set():
            # One event, no task: `stop()` sets it too (a task per event and
            # `asyncio.wait` cost four callbacks and two loop turns per change).
            await self._changed.wait()
            if self._stopping.is_set():
                break
            await self._debounce()
            if self._stopping.is_set():
                break
            await self._reconcile()

    def stop(self) -> None:
        """Make `run()` return after the step in progress."""
        self._stopping.set()
        self._changed.set()  # `run()` waits on it alone
        if self._wake is not None:
            self._wake.cancel()

    async def wait_computed(self, count: int, timeout: float) -> None:
        """Wait until `count` computations have finished (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout), self._done:
            await self._done.wait_for(lambda: self._finished >= count)

    async def _wait(self, event: asyncio.Event, timeout: float) -> None:
        """Wait for `event` or `stop()`, at most `timeout` seconds."""
        waiters = [
            asyncio.ensure_future(event.wait()),
            asyncio.ensure_future(self._stopping.wait()),
        ]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _debounce(self) -> None:
        """Return at once for a lone change not part of a stream, or one finding the loop
        idle; a lone change closer to the last one computed at once than the stream gap
        once that gap has passed, when no other change came meanwhile; otherwise (a
        burst) once changes paused for `quiet_s`, or `max_delay_s` after the first."""
        with self._lock:
            lone = self._pending <= 1
        first = self._first_change if self._first_change is not None else self._last_change
        idle = first - self._idle_since >= self._quiet_s
        stream_gap = max(self._quiet_s / STREAM_SHARE, 2 * self._step_s)
        if idle or (lone and first - self._prompt_at >= stream_gap):
            self._prompt_at = first
            return  # not part of a burst: computed without waiting for quiet
        if lone:
            # Two changes are no stream yet: the second waits out the gap only (a few ms
            # at 10,000 routes, not 100 ms of quiet), which still computes at most one
            # change per gap, so a stream keeps the loop at most about half busy.
            await self._wait(self._stopping, self._prompt_at + stream_gap - self._loop.time())
            with self._lock:
                lone = self._pending <= 1
            if lone:
                self._prompt_at = self._loop.time()
                return
        while not self._stopping.is_set():
            first = self._first_change if self._first_change is not None else self._last_change
            deadline = min(self._last_change + self._quiet_s, first + self._max_delay_s)
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                return
            await self._wait(self._stopping, remaining)

    async def _reconcile(self) -> None:
        seen_at, self._seen_at, self._first_change = self._seen_at, None, None
        with self._lock:
            self._pending = 0
        self._changed.clear()
        self.computations += 1
        started = self._loop.time()
        try:
            await self._step(seen_at)
        finally:
            self._idle_since = self._loop.time()
            self._step_s = self._idle_since - started
            async with self._done:
                self._finished += 1
                self._done.notify_all()

    async def _load(self) -> SlotAssignment:
        assignment, problems = await self._loop.run_in_executor(self._executor, self._ledger.load)
        for problem in problems:
            log.warning("slot state: %s", problem)
        return assignment

    def _retry_later(self) -> float:
        """Schedule the next attempt after a ledger failure: exponential, capped."""
        delay: float = min(self._retry_s * 2.0 ** min(self._failures, 16), self._retry_max_s)
        self._failures += 1
        self._loop.call_later(delay, self.on_change)
        return delay

    def _failed_once(self, cause: str) -> bool:
        """Whether this cause of failure is new since the last success (logged once)."""
        first = cause not in self._said
        self._said.add(cause)
        return first

    def _succeeded(self) -> None:
        if self._said:
            log.info("slot ledger persisted again")
        self._failures, self._said, self.unpersisted = 0, set(), ""

    async def _previous(self) -> tuple[SlotAssignment | None, bool]:
        """The assignment to compute from and whether this step may assign slots; None
        when there is none yet (a follower that has not read the ledger)."""
        if self._authority is None:
            return self._assignment, True
        if not self._authority.assigning():
            self._leading = False
            return self._authority.ledger(), False
        if not self._leading:  # just took the Lease: continue the ledger as it is now
            self._assignment = await self._load()
            self._leading = True
            log.info("leading: continuing the slot ledger")
        return self._assignment, True

    async def _step(self, seen_at: float | None) -> None:
        """`seen_at`: when the first change this step computes was seen (None: none)."""
        try:
            previous, assigning = await self._previous()
        except Exception as error:
            delay = self._retry_later()
            if self._failed_once(f"load {type(error).__name__}"):
                log.error("cannot load the slot ledger: %s; retrying (next in %.1fs)", error, delay)
            return
        if previous is None:
            return  # nothing to compute with yet; the ledger watch calls on_change

        # Computed and saved in one executor hop (the save right after the computation,
        # in the same thread; the publication only once both are done).
        computed = await self._computed(None, previous, assigning, save=assigning)
        if computed is None:
            return
        state, result, contents, unsaved = computed
        persisted = True
        if unsaved is not None:
            self._unpersisted(unsaved)
            written = written_part(unsaved, previous, result.assignment)
            if written is None:
                return
            # One backend's refused shard freezes no other: publish what was
            # written, computed again from it without assigning (as a follower does:
            # the unwritten backends keep what they had, their new endpoints wait).
            computed = await self._computed(state, written, assigning=False)
            if computed is None:
                return
            _, result, contents, _ = computed
            persisted = False
        if persisted and self._failures:
            self._succeeded()
        if self._authority is not None:
            self._authority.retain(result.assignment)
        if assigning:  # a follower's assignment is never kept: the ledger is its truth
            # Keep the very object compute returned: the incremental Computer recognises it.
            self._assignment = result.assignment
        self.waiting = result.waiting
        self._wake_at(result.recompute_at)
        self._publish(result, contents, seen_at)
        # The streams woken by the publication send it first (one turn of the event
        # loop); the logging and the heap's freeze (a few ms at 10,000 routes) follow.
        await asyncio.sleep(0)
        if self._on_published is not None:
            self._on_published()
        self._log_problems(result.rejections, self._source.errors())
        self._log_spares(result)
        pending = self._prepare_pending
        if self._prepare is not None and (pending is None or pending()):
            # Before the freeze: what it makes is kept too.
            try:
                await self._loop.run_in_executor(self._executor, self._prepare)
            except Exception:
                log.exception("preparing the next computation failed; it will do it")
        self._heap.settle(self._encoder.encoded)

    def _log_spares(self, result: ComputeResult) -> None:
        """Each new backend's spare claim, or why no spare could hold it (docs/operations.md,
        "Spare backends"): said once, when the backend first appears."""
        for name, spare in sorted(result.spares_claimed.items()):
            log.info("backend %s claimed spare section %s (no reload needed)", name, spare)
            self._metrics.spare_claims.labels("claimed").inc()
        for name, why in sorted(result.spares_refused.items()):
            log.info("backend %s takes no spare: %s; its agents reload", name, why)
            self._metrics.spare_claims.labels("refused").inc()

    async def _computed(
        self,
        state: ClusterState | None,
        previous: SlotAssignment,
        assigning: bool,
        save: bool = False,
    ) -> Computed | None:
        """Compute from `previous` and encode, in the executor, with `state` (None: the
        source's state now), then with `save` persist the assignment there too when it
        changed (or the ledger drifted): one hop for both. None (logged) when compute
        failed; a failed save is handed back (the fourth item), not raised."""

        def compute_now() -> Computed:
            cluster = self._source.state() if state is None else state
            now = time.time()  # wall clock: freed slots' times are compared across restarts
            started = time.perf_counter()
            if assigning:
                result = self._compute(cluster, previous, now=now)
            else:
                result = self._compute(cluster, previous, now=now, assign_new=False)
            contents = self._encoder.encode(result.workloads)
            self._metrics.computed(time.perf_counter() - started)
            if save and (
                not same_assignment(result.assignment, previous, result.touched)
                or self._ledger.dirty()
            ):
                # What the computation touched: the ledger compares those backends only
                # when `previous` is what it last saved (not all 8,000 per change).
                since = (previous, result.touched) if result.touched is not None else None
                try:
                    self._ledger.save(result.assignment, since)
                except Exception as error:
                    return cluster, result, contents, error
            return cluster, result, contents, None

        try:
            return await self._loop.run_in_executor(self._executor, compute_now)
        except Exception:
            log.exception("computation failed; waiting for the next change")
            return None

    def _wake_at(self, when: float) -> None:
        """Compute again at wall-clock `when` (a certificate's start or end), with no change
        from the source: an expired certificate stops being served on time. One timer;
        a later computation moves it."""
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if when != math.inf:
            delay = min(max(0.0, when - time.time()) + WAKE_MARGIN_S, MAX_WAKE_S)
            self._wake = self._loop.call_later(delay, self.on_change)

    def _unpersisted(self, error: Exception) -> None:
        """A save failed: publish nothing (persist before publish is the guarantee), say
        it once per cause where operators look, and retry with backoff."""
        if isinstance(error, LedgerWriteError):
            cause, permanent = error.cause, error.permanent
        else:
            cause, permanent = type(error).__name__, False
        self._metrics.ledger_write_failed(cause)
        self.unpersisted = str(error)
        delay = self._retry_later()
        if self._failed_once(cause):
            kind = "refused (retrying will not fix it)" if permanent else "failed"
            log.error(
                "slot ledger write %s: %s; not publishing, retrying (next in %.1fs)",
                kind,
                error,
                delay,
                extra=fields(event="ledger-write-failed", cause=cause, permanent=permanent),
            )

    def _publish(
        self,
        result: ComputeResult,
        contents: dict[str, SnapshotContent],
        seen_at: float | None,
    ) -> None:
        outcome = self._store.publish_result(contents, result.pod_workloads)
        for workload in outcome.changed:
            published = self._store.get(workload)
            if published is not None:
                self._metrics.published(workload, published.version, seen_at)
                log.info(
                    "published %s v%d hash %s",
                    workload,
                    published.version,
                    published.content_hash[:12],
                    extra=fields(
                        event="published",
                        workload=workload,
                        version=published.version,
                        content_hash=published.content_hash,
                    ),
                )
        for workload in outcome.removed:
            self._metrics.removed(workload)
            log.info(
                "removed %s (no HAProxy pod left)",
                workload,
                extra=fields(event="removed", workload=workload),
            )

    def _log_problems(
        self, rejections: tuple[RejectedInput, ...], source_errors: list[str]
    ) -> None:
        """Log each distinct rejection or source error once while it persists."""
        current = set(rejections)
        for rejection in sorted(current - self._logged_rejections, key=describe_rejection):
            self._metrics.rejected(rejection.kind, rejection.key)
            log.warning(
                "%s",
                describe_rejection(rejection),
                extra=fields(
                    event="rejected",
                    kind=rejection.kind,
                    object=rejection.object,
                    key=rejection.key,
                    reason=rejection.reason,
                ),
            )
        self._logged_rejections = current
        errors = set(source_errors)
        for error in sorted(errors - self._logged_source_errors):
            log.warning("source: %s", error)
        self._logged_source_errors = errors
