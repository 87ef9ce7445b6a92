"""The start's heap: built with the cyclic collector off, then collected once and frozen."""

from __future__ import annotations

import gc
import weakref

from controlplane.loop.heap import built_without_collector


class Node:
    """A tracked object that can hold a cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def test_the_collector_is_off_inside_and_back_after_with_the_heap_frozen() -> None:
    gc.unfreeze()
    try:
        kept = [Node() for _ in range(1000)]
        with built_without_collector():
            assert not gc.isenabled()
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle made while the collector is off
            gone = weakref.ref(a)
            del a, b
            assert gone() is not None  # nothing collects it meanwhile
        assert gc.isenabled()
        assert gone() is None  # collected once at the end, not frozen with the rest
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    try:
        with built_without_collector():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_the_collector_is_back_when_the_start_fails() -> None:
    try:
        with built_without_collector():
            raise TimeoutError("initial list failed")
    except TimeoutError:
        pass
    assert gc.isenabled()
    gc.unfreeze()
