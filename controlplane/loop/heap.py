"""The heap after a step: the cluster's objects taken out of the cyclic collector's reach.

A 2,000-Service cluster is millions of live objects; Python's full collection walks all of
them and fired every few changes, stalling a one-endpoint change for ~300 ms instead of
~10 (docs/findings.md). `gc.freeze` moves every live object to the permanent generation in
O(1); objects are still freed by reference counting when dropped, only cycles among frozen
objects would stay.
"""

from __future__ import annotations

import gc

# Objects in the oldest generation (not frozen) past which a step collects and freezes
# again; a full collection then walks at most about this many (~10 ms).
REFREEZE_GEN2_OBJECTS = 50_000
# A step that encoded at least this many backends rebuilt enough of the heap to freeze it.
FREEZE_MIN_ENCODED = 500


class Heap:
    """Freezes the heap after the steps that built most of it (the first one, a settings
    change), and collects then freezes again once later steps left many objects."""

    def __init__(self) -> None:
        self.frozen = False  # gc.freeze() ran after a step

    def settle(self, encoded: int) -> None:
        """After a step that encoded `encoded` backends."""
        if self.frozen and encoded < FREEZE_MIN_ENCODED:
            # Objects made since (a route status round, watch events replacing thousands
            # of objects) are walked by every full collection: 40-90 ms stalls with 3,000
            # routes. Once they are many, collect them once and freeze the survivors.
            if len(gc.get_objects(generation=2)) > REFREEZE_GEN2_OBJECTS:
                gc.collect()
                gc.freeze()
            return
        gc.freeze()
        self.frozen = True
