"""A process's long-lived objects out of the cyclic collector's reach, for the control
plane (after a step) and the agent (after an apply).

Both hold hundreds of thousands to millions of live objects (a cluster's model, a held
snapshot and its render caches), and Python's full collection walks all of them: stalls of
100 ms and more charged to whichever change was running (docs/findings.md). `gc.freeze`
moves the live objects to the permanent generation in O(1); they are still freed by
reference counting when dropped, only cycles among frozen objects would stay.
"""

from __future__ import annotations

import gc

# Objects in the oldest generation (not frozen) past which a settle collects and freezes
# again; a full collection then walks at most about this many (~10 ms).
REFREEZE_GEN2_OBJECTS = 50_000


class Heap:
    """Freezes the heap after the work that built most of it (the first, and each one
    `rebuilt`), and collects then freezes again once later work left many objects.
    `collect_rebuilt`: a rebuild unfreezes and collects first, so that the cycles among
    the objects it replaced are freed (the agent's full snapshot); otherwise it only
    freezes (the control plane, whose rebuilds keep most objects alive)."""

    def __init__(self, collect_rebuilt: bool) -> None:
        self.frozen = False  # gc.freeze() ran
        self._collect_rebuilt = collect_rebuilt

    def settle(self, rebuilt: bool) -> None:
        """After a piece of work; `rebuilt`: it replaced most of the heap."""
        if rebuilt or not self.frozen:
            if self._collect_rebuilt:
                gc.unfreeze()  # the replaced objects' cycles too
                gc.collect()
            gc.freeze()
            self.frozen = True
        elif len(gc.get_objects(generation=2)) > REFREEZE_GEN2_OBJECTS:
            gc.collect()
            gc.freeze()
