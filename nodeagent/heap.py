"""The agent's heap after an apply: its long-lived objects out of the cyclic collector's
reach, and malloc's free pages given back.

At 10,000 routes the held snapshot, the render cache and the route cache are hundreds of
thousands of objects, and Python's full collection walks all of them: 115 to 370 ms in a
running agent (docs/findings.md, "The agent's share of a route change"), charged to
whichever route change was being applied. A full snapshot (the heap built again) collects
everything first: most of what was held was replaced. The mechanism is shared with the
control plane (`peerplane/runtime/heap.py`). A cycle among frozen objects that a delta
replaces would stay until the next full snapshot, so the delta path keeps none: what it
replaces is freed by reference counting (`tests/agent/test_heap_garbage.py`).

Each render at 8,000 Services allocates and frees tens of MiB of blocks below malloc's
mmap threshold; their pages stay resident after they are freed, and later renders touch
more of the heap's reservation, so the resident memory climbed about 10 MiB an hour
with malloc's live bytes and Python's objects flat (docs/findings.md, "Agent memory: the
pages malloc keeps"). A settle hands the free pages back (`allocator.trim`), at most every
`TRIM_INTERVAL_S`: a trim costs a few ms and the page faults of the next render touching
them again, so not after every change of a burst.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from peerplane.runtime import allocator, heap
from peerplane.runtime.heap import REFREEZE_GEN2_OBJECTS

__all__ = ["REFREEZE_GEN2_OBJECTS", "TRIM_INTERVAL_S", "Heap"]

TRIM_INTERVAL_S = 30.0  # at most one malloc trim this often (the soak samples every 30 s)


class Heap(heap.Heap):
    """Settled after each apply HAProxy runs (its answer sent); `settle(rebuilt=True)`
    after a full snapshot. `trim` and `clock`: tests."""

    def __init__(
        self,
        trim: Callable[[], object] = allocator.trim,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(collect_rebuilt=True)
        self._trim = trim
        self._clock = clock
        self._trimmed_at: float | None = None  # never: the first settle trims
        self.trims = 0

    def settle(self, rebuilt: bool) -> None:
        super().settle(rebuilt)
        now = self._clock()
        if self._trimmed_at is None or now - self._trimmed_at >= TRIM_INTERVAL_S:
            self._trim()
            self._trimmed_at = now
            self.trims += 1
