"""Resident memory of the fleet's processes: read now, sampled over a run, and whether it
stays flat (the soak benchmark; scale and route propagation report it at their end).

RSS is VmRSS of /proc/PID/status (the whole process, every thread), MiB. A series is
flat when its least-squares slope, after the warm-up, is under `FLAT_MIB_PER_HOUR` or
`FLAT_FRACTION_PER_HOUR` of where it started, whichever is larger: allocators keep freed
pages and a heap settles over the first minutes, so a few MiB an hour is not a leak,
while a leak of one object per change is tens of MiB an hour at one change a second.
The warm-up is the run's first fifth, or until a time the run names (the soak's: once
every Service and route changed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

FLAT_MIB_PER_HOUR = 5.0
FLAT_FRACTION_PER_HOUR = 0.01
WARM_UP_FRACTION = 0.2  # the first fifth of a series is the heap settling, not a trend
# A slope over less than this says nothing per hour (0.3 MiB in a minute is 18 MiB/h):
# shorter runs report it, without a verdict.
MIN_VERDICT_S = 600.0


def rss_mib(pid: int) -> tuple[float, float]:
    """Resident memory of a process now and at its peak (VmRSS, VmHWM of
    /proc/PID/status), MiB: a container's memory limit must hold the peak."""
    found = {"VmRSS:": float("nan"), "VmHWM:": float("nan")}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key = line.split(maxsplit=1)[0] if line.strip() else ""
            if key in found:
                found[key] = int(line.split()[1]) / 1024
    return found["VmRSS:"], found["VmHWM:"]


def slope_per_hour(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) samples, in MiB per hour; nan with fewer
    than two distinct times."""
    if len(samples) < 2:
        return float("nan")
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return float("nan")
    covariance = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return covariance / spread * 3600


def settled(
    samples: Sequence[tuple[float, float]], since: float | None = None
) -> list[tuple[float, float]]:
    """The samples after the warm-up (from `since` seconds, or after `WARM_UP_FRACTION`
    of the run's duration), at least the last two."""
    if len(samples) <= 2:
        return list(samples)
    start, end = samples[0][0], samples[-1][0]
    cut = start + (end - start) * WARM_UP_FRACTION if since is None else since
    after = [s for s in samples if s[0] >= cut]
    return after if len(after) >= 2 else list(samples[-2:])


def flat_limit(start_mib: float) -> float:
    """The slope (MiB per hour) under which a series starting at `start_mib` is flat."""
    return max(FLAT_MIB_PER_HOUR, FLAT_FRACTION_PER_HOUR * start_mib)


@dataclass(frozen=True, slots=True)
class Trend:
    """One process's RSS over a run: after the warm-up, where it started and ended,
    its slope, and whether that is flat; the peak over the whole run."""

    start: float
    end: float
    slope: float  # MiB per hour
    peak: float
    samples: int
    seconds: float  # of the settled part

    @property
    def judged(self) -> bool:
        """Long enough for a verdict (`MIN_VERDICT_S`)."""
        return self.seconds >= MIN_VERDICT_S

    @property
    def flat(self) -> bool:
        return self.slope == self.slope and self.slope < flat_limit(self.start)


def trend(samples: Sequence[tuple[float, float]], since: float | None = None) -> Trend:
    """The trend of one process's (seconds, MiB) samples (at least one), after the
    warm-up (`settled`)."""
    kept = settled(samples, since)
    return Trend(
        start=kept[0][1],
        end=kept[-1][1],
        slope=slope_per_hour(kept),
        peak=max(v for _, v in samples),
        samples=len(samples),
        seconds=kept[-1][0] - kept[0][0],
    )


@dataclass
class RssSampler:
    """Samples the RSS of named processes every `every_s` seconds in a thread, from
    `start()` to `stop()`; a process that went away stops being sampled."""

    pids: Callable[[], Mapping[str, int]]
    every_s: float
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    t0: float = 0.0  # time.monotonic() at `start()`: the series' zero

    def sample(self) -> None:
        now = time.monotonic() - self.t0
        for name, pid in self.pids().items():
            try:
                rss = rss_mib(pid)[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            self.series.setdefault(name, []).append((now, rss))

    def start(self) -> None:
        self.t0 = time.monotonic()
        self.sample()

        def loop() -> None:
            while not self._stop.wait(self.every_s):
                self.sample()

        self._thread = threading.Thread(target=loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def fleet_pids(control_plane: int, agents: Mapping[str, int]) -> dict[str, int]:
    """The processes a fleet's memory is reported for: "controlplane" and each agent by
    its pod name (HAProxy apart: its own figures)."""
    return {"controlplane": control_plane, **agents}


def rss_now(pids: Mapping[str, int]) -> dict[str, float]:
    """RSS now of each named process, MiB."""
    return {name: rss_mib(pid)[0] for name, pid in pids.items()}
