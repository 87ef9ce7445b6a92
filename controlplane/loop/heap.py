"""The heap after a step: the cluster's objects taken out of the cyclic collector's reach.

A 2,000-Service cluster is millions of live objects; Python's full collection walks all of
them and fired every few changes, stalling a one-endpoint change for ~300 ms instead of
~10 (docs/findings.md). `gc.freeze` moves every live object to the permanent generation in
O(1); objects are still freed by reference counting when dropped, only cycles among frozen
objects would stay.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from peerplane.runtime import heap
from peerplane.runtime.heap import REFREEZE_GEN2_OBJECTS

__all__ = ["FREEZE_MIN_ENCODED", "REFREEZE_GEN2_OBJECTS", "Heap", "built_without_collector"]

# A step that encoded at least this many backends rebuilt enough of the heap to freeze it.
FREEZE_MIN_ENCODED = 500


class Heap:
    """Freezes the heap after the steps that built most of it (the first one, a settings
    change), and collects then freezes again once later steps left many objects (a route
    status round, watch events replacing thousands of objects: 40-90 ms stalls with
    3,000 routes). The mechanism is shared with the agent (`peerplane/runtime/heap.py`)."""

    def __init__(self) -> None:
        self._heap = heap.Heap(collect_rebuilt=False)

    @property
    def frozen(self) -> bool:
        """gc.freeze() ran after a step."""
        return self._heap.frozen

    def settle(self, encoded: int) -> None:
        """After a step that encoded `encoded` backends."""
        self._heap.settle(rebuilt=encoded >= FREEZE_MIN_ENCODED)


@contextlib.contextmanager
def built_without_collector() -> Iterator[None]:
    """The cyclic collector off while the start builds the heap (the first list of the
    cluster, the first step), then one collection (cycles made meanwhile are freed) and the
    heap frozen as `Heap.settle` freezes it; the collector back as it was. With it on, its
    collections walked the growing heap again and again: 1.3 of the 2.3 s of CPU that
    listing 8,000 Services and their EndpointSlices took, 0.3-0.6 s of the first
    computation's 1.9 s (docs/findings.md, "First start at 8,000 Services: core-seconds")."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()
