"""Convergence time: from the control plane seeing a change to every agent running it.

Istio's pilot_proxy_convergence_time, per workload: a published version remembers when
the first change it includes was seen (the reconcile loop's clock); once every agent
connected for the workload has ACKed that version or a newer one, the time since is
observed, once per version. An agent that disconnects is not waited for; a version no
agent is connected for is dropped without an observation (nothing converged).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

Observe = Callable[[float], None]


@dataclass
class _Workload:
    acked: dict[Hashable, int] = field(default_factory=dict)  # agent -> version (0: none)
    pending: dict[int, float] = field(default_factory=dict)  # version -> change seen at


class ConvergenceTracker:
    """Pure bookkeeping with an injected clock (`time.monotonic`, as the event loop's);
    `observe` receives each convergence time in seconds. Called from the event loop."""

    def __init__(self, observe: Observe, clock: Callable[[], float] = time.monotonic) -> None:
        self._observe = observe
        self._clock = clock
        self._workloads: dict[str, _Workload] = {}

    def published(self, workload: str, version: int, seen_at: float | None) -> None:
        """`version` was published for a change first seen at `seen_at` (None: no change,
        e.g. the first computation; nothing to measure)."""
        if seen_at is None:
            return
        entry = self._workloads.setdefault(workload, _Workload())
        if not entry.acked:
            return  # no agent to converge: nothing is waited for
        entry.pending[version] = seen_at
        self._settle(entry)

    def connected(self, workload: str, agent: Hashable) -> None:
        """`agent` is served `workload` ("" when it belongs to none yet: not counted)."""
        if workload:
            self._workloads.setdefault(workload, _Workload()).acked.setdefault(agent, 0)

    def acked(self, workload: str, agent: Hashable, version: int) -> None:
        entry = self._workloads.get(workload)
        if entry is None or agent not in entry.acked:
            return  # not counted for this workload (see `connected`)
        entry.acked[agent] = max(version, entry.acked[agent])
        self._settle(entry)

    def disconnected(self, workload: str, agent: Hashable) -> None:
        entry = self._workloads.get(workload)
        if entry is None:
            return
        entry.acked.pop(agent, None)
        if entry.acked:
            self._settle(entry)
        else:  # the last agent left: no one to converge, forget the workload
            del self._workloads[workload]

    def removed(self, workload: str) -> None:
        """The workload is no longer published: its pending versions are dropped."""
        entry = self._workloads.get(workload)
        if entry is not None:
            entry.pending.clear()

    def _settle(self, entry: _Workload) -> None:
        if not entry.pending or not entry.acked:
            return
        everywhere = min(entry.acked.values())
        now = self._clock()
        for version in sorted(v for v in entry.pending if v <= everywhere):
            self._observe(max(0.0, now - entry.pending.pop(version)))
