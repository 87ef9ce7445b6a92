"""The agent's heap after an apply: its long-lived objects out of the cyclic collector's reach.

At 10,000 routes the held snapshot, the render cache and the route cache are hundreds of
thousands of objects, and Python's full collection walks all of them: 115 to 370 ms in a
running agent (docs/findings.md, "The agent's share of a route change"), charged to
whichever route change was being applied. `gc.freeze` moves the live objects to the
permanent generation in O(1); they are still freed by reference counting when dropped,
only cycles among them would stay, so a full snapshot (the heap built again) collects
everything first. The control plane does the same (`controlplane/loop/heap.py`).
"""

from __future__ import annotations

import gc

# Objects in the oldest generation (not frozen) past which an apply collects and freezes
# again; a full collection then walks at most about this many (~10 ms).
REFREEZE_GEN2_OBJECTS = 50_000


class Heap:
    """Freezes the heap after the applies that built most of it (the first, a full
    snapshot), and collects then freezes again once deltas left many objects."""

    def __init__(self) -> None:
        self.frozen = False

    def settle(self, rebuilt: bool) -> None:
        """After an apply that HAProxy runs (its answer sent); `rebuilt`: a full
        snapshot, whose parts replaced most of what was held."""
        if rebuilt or not self.frozen:
            gc.unfreeze()  # the replaced objects' cycles too
            gc.collect()
            gc.freeze()
            self.frozen = True
        elif len(gc.get_objects(generation=2)) > REFREEZE_GEN2_OBJECTS:
            gc.collect()
            gc.freeze()
