"""The joined group digests spliced from the previous version's (`peerplane.parts.
spliced_group_digests`, both sides of a route change) equal the join made from scratch,
over random key sets before and after: groups added, changed and removed at any place,
the keys held in key order or apart from it (`group_order`)."""

from __future__ import annotations

import hashlib
import random

import pytest

from peerplane.parts import SPLICED_MAX, ContentParts, spliced_group_digests

pytestmark = pytest.mark.unit


def _parts(digests: dict[str, bytes], ordered: bool) -> ContentParts:
    """Parts of these group digests, in key order or in the order given with the keys
    sorted apart."""
    keys = sorted(digests)
    framed = {key: b"" for key in digests}
    if ordered:
        digests = {key: digests[key] for key in keys}
        framed = {key: b"" for key in keys}
    return ContentParts(
        b"", b"", {}, b"", b"", route_groups=framed, group_digests=digests,
        group_order=None if ordered else keys,
    )  # fmt: skip


def _digest(key: str, version: int) -> bytes:
    return hashlib.sha256(f"{key}@{version}".encode()).digest()


@pytest.mark.parametrize("seed", range(40))
def test_spliced_equals_joined_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    universe = [f"80/h{n}.example" for n in range(rng.randint(1, 60))]
    before = {k: _digest(k, 0) for k in rng.sample(universe, rng.randint(0, len(universe)))}
    after = dict(before)
    touched: set[str] = set()
    for key in rng.sample(universe, rng.randint(0, min(8, len(universe)))):
        if key in after and rng.random() < 0.4:
            del after[key]
        else:
            after[key] = _digest(key, rng.randint(1, 3))
        touched.add(key)
    old = _parts(before, rng.random() < 0.5)
    new_ordered = rng.random() < 0.5
    new = _parts(after, new_ordered)
    spliced = spliced_group_digests(old, new.group_digests, new.group_order, touched)
    assert spliced == b"".join(after[key] for key in sorted(after))
    assert spliced == new.joined_group_digests()


def test_too_many_touched_keys_are_joined_on_use() -> None:
    keys = [f"80/h{n:03}.example" for n in range(SPLICED_MAX + 1)]
    old = _parts({}, True)
    new = _parts({k: _digest(k, 1) for k in keys}, True)
    assert spliced_group_digests(old, new.group_digests, None, keys) is None
    assert new.joined_group_digests() == b"".join(_digest(k, 1) for k in keys)
