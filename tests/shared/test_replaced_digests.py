"""The joined backend digests spliced from the previous version's (`peerplane.parts.
replaced_digests`, both sides of an endpoint change) equal the join made from scratch;
what it cannot splice it leaves to the join on first use."""

from __future__ import annotations

import hashlib
import random

import pytest

from peerplane.parts import DIGEST_SIZE, SPLICED_MAX, ContentParts, replaced_digests

pytestmark = pytest.mark.unit


def _digest(name: str, version: int) -> bytes:
    return hashlib.sha256(f"{name}@{version}".encode()).digest()


def _parts(digests: dict[str, bytes]) -> ContentParts:
    return ContentParts(
        b"", b"", {name: b"" for name in digests}, b"", b"", backend_digests=digests
    )


@pytest.mark.parametrize("seed", range(20))
def test_replaced_in_place_equals_joined_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"default_svc-{n:04}_http" for n in range(rng.randint(1, 200))]
    before = {name: _digest(name, 0) for name in names}
    after = dict(before)
    positions = []
    for at in rng.sample(range(len(names)), rng.randint(0, min(SPLICED_MAX, len(names)))):
        after[names[at]] = _digest(names[at], 1)
        positions.append((at, after[names[at]]))
    joined = replaced_digests(_parts(before).joined_backend_digests(), positions, len(names))
    assert joined == b"".join(after.values())
    new = ContentParts(
        b"", b"", {n: b"" for n in after}, b"", b"", backend_digests=after, backend_joined=joined
    )
    assert new.content_hash() == _parts(after).content_hash()


def test_what_cannot_be_spliced_is_left_to_the_join() -> None:
    digests = {f"b{n}": _digest(f"b{n}", 0) for n in range(SPLICED_MAX + 1)}
    joined = _parts(digests).joined_backend_digests()
    every = [(n, _digest(f"b{n}", 1)) for n in range(SPLICED_MAX + 1)]
    assert replaced_digests(joined, every, len(digests)) is None  # too many
    assert replaced_digests(joined, every[:1], len(digests) + 1) is None  # count differs
    assert replaced_digests(joined, [(-1, every[0][1])], len(digests)) is None  # not found
    assert replaced_digests(joined, [(0, b"short")], len(digests)) is None
    assert replaced_digests(None, every[:1], len(digests)) is None
    assert replaced_digests(joined, [], len(digests)) is joined


def test_joined_digests_that_do_not_match_the_digests_are_not_trusted() -> None:
    digests = {"a": _digest("a", 0), "b": _digest("b", 0)}
    parts = ContentParts(
        b"", b"", {"a": b"", "b": b""}, b"", b"", backend_digests=digests,
        backend_joined=b"\0" * DIGEST_SIZE,
    )  # fmt: skip
    assert parts.joined_backend_digests() == b"".join(digests.values())


def test_a_version_lets_go_of_its_joined_digests_once_released() -> None:
    parts = _parts({"a": _digest("a", 0)})
    hashed = parts.content_hash()
    assert parts.backend_joined is not None
    parts.release_joined()
    assert parts.backend_joined is None and parts.group_joined is None
    assert parts.content_hash() == hashed  # joined again on use
