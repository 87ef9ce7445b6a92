"""The agent's heap after an apply: its long-lived objects out of the cyclic collector's reach.

At 10,000 routes the held snapshot, the render cache and the route cache are hundreds of
thousands of objects, and Python's full collection walks all of them: 115 to 370 ms in a
running agent (docs/findings.md, "The agent's share of a route change"), charged to
whichever route change was being applied. A full snapshot (the heap built again) collects
everything first: most of what was held was replaced. The mechanism is shared with the
control plane (`peerplane/runtime/heap.py`).
"""

from __future__ import annotations

from peerplane.runtime import heap
from peerplane.runtime.heap import REFREEZE_GEN2_OBJECTS

__all__ = ["REFREEZE_GEN2_OBJECTS", "Heap"]


class Heap(heap.Heap):
    """Settled after each apply HAProxy runs (its answer sent); `settle(rebuilt=True)`
    after a full snapshot."""

    def __init__(self) -> None:
        super().__init__(collect_rebuilt=True)
