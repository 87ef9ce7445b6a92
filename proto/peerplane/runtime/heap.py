"""A process's long-lived objects out of the cyclic collector's reach, for the control
plane (after a step) and the agent (after an apply).

Both hold hundreds of thousands to millions of live objects (a cluster's model, a held
snapshot and its render caches), and Python's full collection walks all of them: stalls of
100 ms and more charged to whichever change was running (docs/findings.md). `gc.freeze`
moves the live objects to the permanent generation in O(1); they are still freed by
reference counting when dropped, only cycles among frozen objects would stay.

How many objects the oldest generation holds is only known by listing it
(`gc.get_objects`), which walks objects scattered over the whole heap: 2 to 4 ms per step
at 8,000 Services (the largest piece of an endpoint change's CPU in Kubernetes mode). Objects
only reach that generation through a collection of generation 1 or a full one, and each
moves at most what the young generations hold (about threshold0 x threshold1 objects), so
a settle counts those collections (O(1)) and lists the generation only once they could
have brought it past `REFREEZE_GEN2_OBJECTS`.
"""

from __future__ import annotations

import gc

# Objects in the oldest generation (not frozen) past which a settle collects and freezes
# again; a full collection then walks at most about this many (~10 ms).
REFREEZE_GEN2_OBJECTS = 50_000

# Tracked objects allocated (net of those freed) after which the youngest generation is
# collected: Python's default is 700 (`tune_collector`).
YOUNG_COLLECTION_AT = 10_000


def tune_collector() -> None:
    """Collect the youngest generation every `YOUNG_COLLECTION_AT` allocations, not every
    700; the older generations' thresholds are kept. Each process calls it at its start.

    A change at 8,000 Services makes a few containers of thousands of references (the
    next version of a tuple of Services, of the slot assignment) and some hundred other
    objects: with the default, about one young collection per change, and the one that
    finds such a container alive visits each object it refers to, scattered over the heap
    and out of the CPU's caches by then: 1.6 ms of an endpoint change's control-plane CPU
    (docs/findings.md, "Control-plane CPU per endpoint change: young collections").
    Collected every 10,000, most of those containers were freed by reference counting (the
    next version replaced them) before a collection could see them; a young generation of
    10,000 objects is a few MiB at most."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_AT, older, oldest)


def promotions() -> int:
    """Collections so far that moved objects into the oldest generation (of generation 1,
    and full ones)."""
    stats = gc.get_stats()
    return int(stats[1]["collections"]) + int(stats[2]["collections"])


def most_promoted() -> int:
    """The most objects one such collection moves: what the young generations hold."""
    threshold0, threshold1, _ = gc.get_threshold()
    return (threshold0 + 1) * (threshold1 + 1)


class Heap:
    """Freezes the heap after the work that built most of it (the first, and each one
    `rebuilt`), and collects then freezes again once later work left many objects.
    `collect_rebuilt`: a rebuild unfreezes and collects first, so that the cycles among
    the objects it replaced are freed (the agent's full snapshot); otherwise it only
    freezes (the control plane, whose rebuilds keep most objects alive)."""

    def __init__(self, collect_rebuilt: bool) -> None:
        self.frozen = False  # gc.freeze() ran
        self._collect_rebuilt = collect_rebuilt
        self._gen2_at_most = 0  # objects the oldest generation may hold (frozen: all)
        self._promotions = promotions()  # as of `_gen2_at_most`

    def settle(self, rebuilt: bool) -> None:
        """After a piece of work; `rebuilt`: it replaced most of the heap."""
        if rebuilt or not self.frozen:
            if self._collect_rebuilt:
                gc.unfreeze()  # the replaced objects' cycles too
                gc.collect()
            elif not gc.isenabled():
                # The collector is off (the control plane's start builds its heap so): the
                # cycles made meanwhile were never looked at, and frozen they would stay.
                gc.collect()
            gc.freeze()
            self.frozen = True
            self._counted(0)
            return
        now = promotions()
        self._gen2_at_most += (now - self._promotions) * most_promoted()
        self._promotions = now
        if self._gen2_at_most <= REFREEZE_GEN2_OBJECTS:
            return
        held = len(gc.get_objects(generation=2))
        if held > REFREEZE_GEN2_OBJECTS:
            gc.collect()
            gc.freeze()
            held = 0
        self._counted(held)

    def _counted(self, held: int) -> None:
        """The oldest generation holds `held` objects now."""
        self._gen2_at_most = held
        self._promotions = promotions()
