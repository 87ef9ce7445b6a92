"""Stream opens per peer, as a token bucket: the cost of a reconnect loop is bounded.

Every admitted stream costs a full snapshot, CPU and log lines; 8 streams reconnecting in
a tight loop got 3,626 full snapshots (3.4 GB) in 20 s. A key (an agent: its host and
pod; or a whole host, more generously) may open `burst` streams at once and `rate_per_s`
a second after that; past it the stream is refused with the seconds until the next
allowed open, and the refusal is logged once per key per `log_every_s`. An agent's
reconnect backoff (exponential from 0.5 s) stays well inside the default; 200 agents
behind one address start at once within the host's burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_OPENS_PER_S = 4.0
DEFAULT_OPENS_BURST = 32
MAX_PEERS_TRACKED = 10_000  # full buckets are forgotten past this many peers


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float
    said_at: float | None = None


class PeerRateLimit:
    """Token buckets per peer host; `rate_per_s` 0 means unlimited."""

    def __init__(
        self,
        rate_per_s: float = DEFAULT_OPENS_PER_S,
        burst: int = DEFAULT_OPENS_BURST,
        *,
        log_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = max(1, burst)
        self._log_every_s = log_every_s
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def scaled(self, rate: float, burst: int) -> PeerRateLimit:
        """Another limit, `rate` and `burst` times this one (same clock and logging)."""
        return PeerRateLimit(
            self.rate_per_s * rate,
            self.burst * burst,
            log_every_s=self._log_every_s,
            clock=self._clock,
        )

    def take(self, host: str) -> float:
        """0.0 when `host` may open a stream now (a token is taken), else the seconds
        until it may."""
        if self.rate_per_s <= 0:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(host)
        if bucket is None:
            if len(self._buckets) >= MAX_PEERS_TRACKED:
                self._forget_full(now)
            bucket = self._buckets[host] = _Bucket(float(self.burst), now)
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate_per_s)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.rate_per_s

    def first_refusal(self, host: str) -> bool:
        """Whether a refusal of `host` is to be logged: once per `log_every_s`."""
        bucket = self._buckets.get(host)
        if bucket is None:
            return True
        now = self._clock()
        if bucket.said_at is not None and now - bucket.said_at < self._log_every_s:
            return False
        bucket.said_at = now
        return True

    def _forget_full(self, now: float) -> None:
        for host, bucket in list(self._buckets.items()):
            if bucket.tokens + (now - bucket.at) * self.rate_per_s >= self.burst:
                del self._buckets[host]
