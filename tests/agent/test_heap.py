"""The agent's heap after an apply (`nodeagent/heap.py`): frozen, so that Python's full
collection does not walk the held snapshot and the caches (115 to 370 ms at 10,000 routes,
charged to the route change being applied); collected and frozen again once deltas left
many objects, everything collected first after a full snapshot."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from nodeagent.cli import lifecycle, wiring
from nodeagent.heap import REFREEZE_GEN2_OBJECTS, TRIM_INTERVAL_S, Heap
from nodeagent.stream.client import Client
from nodeagent.stream.protocol import Identity
from peerplane.runtime import heap as runtime_heap
from tests.agent.test_client import FakePlane, FlakyApplier, running, serve, within
from tests.helpers.haproxy_env import free_port, snapshot
from tests.helpers.malloc import glibc_only, rss_around_holes

pytestmark = pytest.mark.unit


class _Node:
    next: object = None


def test_applies_freeze_the_heap_and_refreeze_once_many_objects_piled_up() -> None:
    heap = Heap()
    try:
        heap.settle(rebuilt=False)  # the first apply freezes what the agent holds
        assert heap.frozen and gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        kept = [[n] for n in range(REFREEZE_GEN2_OBJECTS + 1_000)]  # long-lived, new
        gc.collect()  # they reach the oldest generation
        assert len(gc.get_objects(generation=2)) > REFREEZE_GEN2_OBJECTS
        heap.settle(rebuilt=False)
        assert len(gc.get_objects(generation=2)) < REFREEZE_GEN2_OBJECTS
        assert gc.get_freeze_count() >= frozen + len(kept)
        settled = gc.get_freeze_count()
        heap.settle(rebuilt=False)  # nothing piled up since: nothing done
        assert gc.get_freeze_count() == settled
        cycle = _Node()
        cycle.next = cycle
        gone = weakref.ref(cycle)
        gc.freeze()
        del cycle  # garbage among the frozen objects
        heap.settle(rebuilt=False)
        assert gone() is not None  # a delta's settle leaves the frozen ones alone
        heap.settle(rebuilt=True)  # a full snapshot: everything collected, then frozen
        assert gone() is None and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_a_settle_lists_the_oldest_generation_only_once_collections_could_fill_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every settle listed the oldest generation to count it (`gc.get_objects`: 2 to 4 ms
    per step at 8,000 Services, objects scattered over the heap); objects reach it only
    through collections of generation 1 and full ones, each moving at most what the young
    generations hold, so settles after work that caused too few of them to fill it count
    nothing, and the refreeze still comes once they could have."""
    listed: list[int] = []
    get_objects = gc.get_objects

    def counting(generation: int | None = None) -> list[object]:
        listed.append(generation if generation is not None else -1)
        return get_objects() if generation is None else get_objects(generation)

    heap = runtime_heap.Heap(collect_rebuilt=False)
    try:
        heap.settle(rebuilt=False)  # freezes
        monkeypatch.setattr(gc, "get_objects", counting)
        for _ in range(20):  # small steps: a few young collections at most, none of gen 1
            kept = [[n] for n in range(50)]
            heap.settle(rebuilt=False)
        assert listed == []
        enough = REFREEZE_GEN2_OBJECTS // runtime_heap.most_promoted() + 2
        for _ in range(enough):
            gc.collect(1)  # each could move a full young generation
        heap.settle(rebuilt=False)
        assert listed == [2]  # counted, found few: nothing collected
        heap.settle(rebuilt=False)
        assert listed == [2]  # and counted again only after more such collections
        assert kept
    finally:
        gc.unfreeze()


class RecordingHeap(Heap):
    def __init__(self) -> None:
        super().__init__()
        self.settled: list[bool] = []

    def settle(self, rebuilt: bool) -> None:
        self.settled.append(rebuilt)


def test_the_client_settles_the_heap_after_each_applied_snapshot_only() -> None:
    """A full snapshot NACKed once (a fault), then applied: one settle, `rebuilt`."""
    port = free_port("127.0.0.1")
    heap = RecordingHeap()
    client = Client(
        f"127.0.0.1:{port}",
        Identity("ns", "pod-a"),
        FlakyApplier(fails=1),
        retry_initial=0.05,
        heap=heap,
    )

    async def scenario() -> None:
        plane = FakePlane([snapshot([], [], version=3)])
        async with serve(plane, port), running(client):
            nack, ack = await within(plane.answers.get()), await within(plane.answers.get())
            assert (nack.WhichOneof("message"), ack.WhichOneof("message")) == ("nack", "ack")

    asyncio.run(within(scenario(), 30))
    assert heap.settled == [True]


class _Restoring:
    def __init__(self, restored: bool) -> None:
        self.restored = restored

    def restore(self) -> bool:
        return self.restored

    def close(self) -> None:
        pass


class _Streaming:
    def __init__(self, heap: RecordingHeap) -> None:
        self.heap = heap
        self.settled_at_start: list[bool] | None = None

    async def run(self) -> None:
        self.settled_at_start = list(self.heap.settled)


@pytest.mark.parametrize("restored", [True, False])
def test_a_restored_snapshot_settles_the_heap_before_the_stream_starts(restored: bool) -> None:
    """A restarted agent holds its saved snapshot before any change arrives: its heap is
    settled then, not after the first route change's answer."""
    client = _Streaming(RecordingHeap())
    agent = wiring.Agent(_Restoring(restored), client, None, None)  # type: ignore[arg-type]
    assert asyncio.run(lifecycle._serve(agent)) == 0
    assert client.settled_at_start == ([True] if restored else [])


HELD_MIB = 48  # `tests.helpers.malloc.rss_around_holes`


@glibc_only
def test_a_settle_gives_malloc_free_pages_in_the_middle_of_the_heap_back() -> None:
    """Freed blocks between live ones stay resident (glibc trims only a free top): a
    render's transient blocks kept the agent's RSS climbing for hours (docs/findings.md,
    "Agent memory: the pages malloc keeps"). After an apply settles they go back."""
    mib = 1 << 20
    before, freed, settled = rss_around_holes(
        "from nodeagent.heap import Heap\nHeap().settle(rebuilt=False)"
    )
    assert before - freed < HELD_MIB * mib / 4  # freeing alone gives little back
    assert freed - settled > HELD_MIB * mib / 2, (before, freed, settled)


def test_a_settle_trims_at_most_every_trim_interval() -> None:
    """A trim costs a few ms and the next render's page faults: not after every apply of
    a burst, but again once the interval passed."""
    now = [100.0]
    trims: list[float] = []
    heap = Heap(trim=lambda: trims.append(now[0]), clock=lambda: now[0])
    try:
        for _ in range(5):  # a burst: the first settle trims
            heap.settle(rebuilt=False)
            now[0] += 1.0
        now[0] = 100.0 + TRIM_INTERVAL_S
        heap.settle(rebuilt=False)
        heap.settle(rebuilt=True)  # a full snapshot within the interval: no trim either
        assert trims == [100.0, 100.0 + TRIM_INTERVAL_S]
    finally:
        gc.unfreeze()
