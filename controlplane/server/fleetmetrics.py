"""The fleet's sync state as metrics: agents per workload and state, and how long the
oldest unanswered version has been owed.

Counted when Prometheus scrapes, never on a stream's path: the scrape (the metrics
server's thread) asks the event loop, which owns the sessions and the store, to count
and waits for the answer (bounded; a busy loop yields the last counts). So a fleet of
thousands of agents costs one pass over the sessions per scrape, nothing per message.

States, per agent (`classify`):
- `synced`: runs the workload's current content and nothing newer is pending;
- `pending`: a version was sent and is not answered yet (its age is
  `peerplane_agents_pending_seconds`);
- `nacked`: rejected the last content sent and runs an older one;
- `waiting`: not served yet (no workload, nothing published, current not sent yet).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from controlplane.metrics import label
from controlplane.server.protocol import PublishedVersion, StreamState

log = logging.getLogger(__name__)

STATES = ("synced", "pending", "nacked", "waiting")
NO_WORKLOAD = "none"  # workload label of agents not mapped to a workload yet
ANSWER_TIMEOUT_S = 2.0


def classify(state: StreamState, current: PublishedVersion | None) -> str:
    """One agent's state against its workload's current version (None: none published)."""
    if state.pending is not None:
        return "pending"
    if current is None:
        return "waiting"
    if state.acked_hash == current.content_hash:
        return "synced"
    if state.nacked is not None:
        return "nacked"
    return "waiting"


@dataclass(frozen=True, slots=True)
class FleetCounts:
    """Agents per (workload, state), every state of every published workload present
    (zeros included, so `== 0` alerts see them), and per workload the age in seconds of
    its oldest pending version (0 when none)."""

    agents: dict[tuple[str, str], int] = field(default_factory=dict)
    pending_seconds: dict[str, float] = field(default_factory=dict)
    # Per workload, the most parts one of its agents runs without (0 when none).
    set_aside: dict[str, int] = field(default_factory=dict)


def count(
    states: Iterable[StreamState],
    workloads: Iterable[str],
    current: Callable[[str], PublishedVersion | None],
    now: float,
    set_aside: Iterable[tuple[str, int]] = (),
) -> FleetCounts:
    """Count `states` (one per connected agent) by workload and state; `workloads` are
    the published ones, `current` a workload's published version, `now` monotonic;
    `set_aside`: (workload, parts its last Ack set aside) per agent."""
    agents: dict[tuple[str, str], int] = {}
    pending: dict[str, float] = {}
    aside: dict[str, int] = {}
    for workload in workloads:
        name = label(workload)
        for state_name in STATES:
            agents[(name, state_name)] = 0
        pending[name] = 0.0
        aside[name] = 0
    for workload, parts in set_aside:
        name = label(workload) if workload else NO_WORKLOAD
        aside[name] = max(aside.get(name, 0), parts)
    for state in states:
        published = current(state.workload) if state.workload else None
        name = label(state.workload) if state.workload else NO_WORKLOAD
        key = (name, classify(state, published))
        agents[key] = agents.get(key, 0) + 1
        if state.pending is not None:
            age = max(0.0, now - state.pending.since)
            pending[name] = max(pending.get(name, 0.0), age)
    return FleetCounts(agents, pending, aside)


class FleetCollector(Collector):
    """`peerplane_agents{workload,state}` and `peerplane_agents_pending_seconds{workload}`,
    counted on `loop` by `counter` at each scrape."""

    def __init__(
        self,
        counter: Callable[[], FleetCounts],
        loop: asyncio.AbstractEventLoop,
        timeout_s: float = ANSWER_TIMEOUT_S,
    ) -> None:
        self._counter = counter
        self._loop = loop
        self._timeout_s = timeout_s
        self._last = FleetCounts()

    def _counts(self) -> FleetCounts:
        """Counted on the loop's thread (directly when called there); the last counts if
        the loop does not answer in time or is closed."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._last = self._counter()
            return self._last
        answer: concurrent.futures.Future[FleetCounts] = concurrent.futures.Future()

        def run() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(self._counter())
                except Exception as error:  # reported to the scrape, not lost in the loop
                    answer.set_exception(error)

        try:
            self._loop.call_soon_threadsafe(run)
            self._last = answer.result(self._timeout_s)
        except (RuntimeError, concurrent.futures.TimeoutError):
            answer.cancel()
            log.debug("fleet counts: the event loop did not answer; last counts served")
        return self._last

    def collect(self) -> Iterator[Metric]:
        counts = self._counts()
        agents = GaugeMetricFamily(
            "peerplane_agents",
            "Connected agents by workload and sync state (synced, pending, nacked, waiting)",
            labels=["workload", "state"],
        )
        for (workload, state), value in sorted(counts.agents.items()):
            agents.add_metric([workload, state], value)
        yield agents
        pending = GaugeMetricFamily(
            "peerplane_agents_pending_seconds",
            "Age of the workload's oldest version sent and not answered: since its "
            "publication, or the agent's connection if later (0: none pending)",
            labels=["workload"],
        )
        for workload, seconds in sorted(counts.pending_seconds.items()):
            pending.add_metric([workload], round(seconds, 3))
        yield pending
        aside = GaugeMetricFamily(
            "peerplane_agent_parts_set_aside",
            "The most parts (certificates, backends, route rules) one agent of the workload "
            "runs without, because it or HAProxy refused them (0: none); ListAgents and "
            "status name them",
            labels=["workload"],
        )
        for workload, parts in sorted(counts.set_aside.items()):
            aside.add_metric([workload], parts)
        yield aside

    def describe(self) -> Iterator[Metric]:
        """Names only: registering must not ask the loop to count."""
        yield GaugeMetricFamily("peerplane_agents", "", labels=["workload", "state"])
        yield GaugeMetricFamily("peerplane_agents_pending_seconds", "", labels=["workload"])
        yield GaugeMetricFamily("peerplane_agent_parts_set_aside", "", labels=["workload"])
