"""Where two tuples differ, found by identity in C: what a change touched in a long
sequence of mostly shared objects (a listener's rules before and after a route change)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count
from operator import is_not


def common_ends(old: Sequence[object], new: Sequence[object]) -> tuple[int, int]:
    """The lengths of the longest common prefix and suffix of `old` and `new`, elements
    compared by identity, the suffix not overlapping the prefix: `old[head:len(old) -
    tail]` and `new[head:len(new) - tail]` hold everything that differs."""
    shortest = min(len(old), len(new))
    head = next(compress(count(), map(is_not, old, new)), shortest)
    tail = next(
        compress(count(), map(is_not, reversed(old[head:]), reversed(new[head:]))),
        shortest - head,
    )
    return head, tail
