"""Backends held in persistent maps (`immutables.Map`, which keep no order) with their
payload order beside them (`ContentParts.backend_order`): the payload, the content hash
and the changed backends are those of the same backends held in dicts in that order."""

from __future__ import annotations

import random

import pytest
from immutables import Map

from peerplane.parts import ContentParts, backend_changes, digests_of

pytestmark = pytest.mark.unit


def _framed(name: str, version: int) -> bytes:
    return f"<{name}@{version}>".encode()


def _in_dicts(backends: dict[str, bytes]) -> ContentParts:
    return ContentParts(b"w", b"p", backends, b"f", b"x")


def _in_maps(backends: dict[str, bytes]) -> ContentParts:
    return ContentParts(
        b"w",
        b"p",
        Map(backends),
        b"f",
        b"x",
        backend_digests=Map(digests_of(backends)),
        backend_order=tuple(backends),
    )


@pytest.mark.parametrize("seed", range(10))
def test_maps_with_their_order_join_hash_and_differ_as_dicts_do(seed: int) -> None:
    rng = random.Random(seed)
    names = sorted(f"default_svc-{n:05}_http" for n in rng.sample(range(99_999), 300))
    before = {name: _framed(name, 0) for name in names}
    after = dict(before)
    for name in rng.sample(names, rng.randint(1, 40)):
        after[name] = _framed(name, 1)
    old, new = _in_maps(before), _in_maps(after)
    assert new.join() == _in_dicts(after).join()
    assert new.content_hash() == _in_dicts(after).content_hash()
    changed, removed = backend_changes(old, new)
    expected = backend_changes(_in_dicts(before), _in_dicts(after))
    assert list(changed.items()) == list(expected[0].items())  # payload order
    assert removed == expected[1] == []


def test_an_order_of_one_backend_or_none() -> None:
    for backends in ({}, {"a": _framed("a", 0)}):
        assert _in_maps(backends).join() == _in_dicts(backends).join()
        assert _in_maps(backends).content_hash() == _in_dicts(backends).content_hash()
