"""nodeagent/apply/saved.py and journal.py: the saved snapshot as a base and a journal of
delta records. What loads is always a state that was saved whole: the last one, or, after
a crash in the middle of a save, the one before (never a mix, never nothing while a base
is there); the journal is compacted into a new base every `max_records` records.

docs/design.md, "The saved snapshot: a base and a journal"."""

from __future__ import annotations

import itertools
import os
import tracemalloc
from pathlib import Path

import pytest

from nodeagent.apply import journal
from nodeagent.apply.saved import StateStore
from nodeagent.held import ChangeSet, Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import delta_between, random_route_versions, random_versions

pytestmark = pytest.mark.unit


def _chain(versions: list[pb.Snapshot]) -> list[tuple[Held, ChangeSet | None]]:
    """Each version held as the agent holds it (the first full, the others by deltas),
    with the change set from the one before (None for the first)."""
    held = Held.from_snapshot(versions[0])
    chain: list[tuple[Held, ChangeSet | None]] = [(held, None)]
    for old, new in itertools.pairwise(versions):
        held, change = held.apply(delta_between(old, new))
        chain.append((held, change))
    return chain


def _saved(store: StateStore, chain: list[tuple[Held, ChangeSet | None]]) -> None:
    before = None
    for held, change in chain:
        store.save_held(held, before, change)
        before = held


@pytest.mark.parametrize(
    "versions",
    [list(random_versions(7, 30)), list(random_route_versions(3, 30))],
    ids=["services", "routes"],
)
def test_every_saved_state_loads_whole_through_base_and_journal(
    tmp_path: Path, versions: list[pb.Snapshot]
) -> None:
    """Over random versions of Services, settings, peers and routes, as the control plane
    computes them: after each save a fresh store (an agent restart) loads exactly that
    version, bytes and hash; every 8th save writes a base, the others append."""
    store = StateStore(str(tmp_path / "state"), max_records=8)
    before = None
    for i, (held, change) in enumerate(_chain(versions)):
        store.save_held(held, before, change)
        before = held
        assert store.journal_records == i % 9
        loaded = StateStore(str(tmp_path / "state")).load_held()
        assert loaded is not None
        assert loaded.serialized() == versions[i].SerializeToString(deterministic=True)
        assert loaded.computed_hash() == versions[i].content_hash
    # A restarted store appends where the journal ended.
    again = StateStore(str(tmp_path / "state"), max_records=8)
    last = again.load_held()
    assert last is not None and again.journal_records == (len(versions) - 1) % 9
    moved, change = last.apply(delta_between(versions[-1], versions[-2]))
    again.save_held(moved, last, change)
    assert again.journal_records == (len(versions) - 1) % 9 + 1
    assert StateStore(str(tmp_path / "state")).load() == moved.message()


def test_a_journal_cut_at_any_byte_loads_the_last_whole_state(tmp_path: Path) -> None:
    """A crash in the middle of an append leaves a record cut anywhere (its length, its
    CRC, its payload): the replay stops before it, and the next save overwrites it."""
    versions = list(random_versions(11, 4))
    chain = _chain(versions)
    state = tmp_path / "state"
    store = StateStore(str(state))
    _saved(store, chain)
    whole = (state / "snapshot.journal").read_bytes()
    ends = [journal.HEADER_SIZE, *(r.end for r in journal.records(whole))]
    assert len(ends) == len(versions) and ends[-1] == len(whole)
    for cut in range(len(whole) + 1):
        (state / "snapshot.journal").write_bytes(whole[:cut])
        loaded = StateStore(str(state)).load_held()
        assert loaded is not None
        records = sum(1 for end in ends[1:] if end <= cut)  # header cut: the base alone
        assert loaded.content_hash == versions[records].content_hash, cut
        assert loaded.serialized() == versions[records].SerializeToString(deterministic=True)
    # After a cut in the middle of the last record, the next save lands after the whole ones.
    (state / "snapshot.journal").write_bytes(whole[: ends[-1] - 3])
    store = StateStore(str(state))
    held = store.load_held()
    assert held is not None and held.content_hash == versions[-2].content_hash
    store.save_held(chain[-1][0], held, chain[-1][1])
    assert (state / "snapshot.journal").read_bytes() == whole
    assert StateStore(str(state)).load() == versions[-1]


def test_a_record_with_a_flipped_byte_ends_the_replay_there(tmp_path: Path) -> None:
    versions = list(random_versions(5, 4))
    state = tmp_path / "state"
    _saved(StateStore(str(state)), _chain(versions))
    data = bytearray((state / "snapshot.journal").read_bytes())
    second = list(journal.records(bytes(data)))[1]
    data[second.end - 1] ^= 0xFF  # the second record's last payload byte
    (state / "snapshot.journal").write_bytes(bytes(data))
    assert StateStore(str(state)).load() == versions[1]


def test_a_crash_between_a_new_base_and_the_journal_reset_loads_the_new_base(
    tmp_path: Path,
) -> None:
    """Compaction writes the new base, then an empty journal naming it: a crash between
    leaves the old base's journal beside the new base; it names other bytes and is not
    replayed onto the new base (which already holds everything)."""
    versions = list(random_versions(9, 6))
    chain = _chain(versions)
    state = tmp_path / "state"
    _saved(StateStore(str(state)), chain[:4])  # base v1, journal to v4
    old_journal = (state / "snapshot.journal").read_bytes()
    store = StateStore(str(state))
    store.save(versions[5])  # a new base, and its own empty journal
    (state / "snapshot.journal").write_bytes(old_journal)  # ... as if the reset never happened
    assert StateStore(str(state)).load() == versions[5]


def test_a_store_whose_journal_was_deleted_writes_a_base(tmp_path: Path) -> None:
    versions = list(random_versions(2, 3))
    chain = _chain(versions)
    state = tmp_path / "state"
    store = StateStore(str(state))
    _saved(store, chain[:2])
    os.unlink(state / "snapshot.journal")
    store.save_held(chain[2][0], chain[1][0], chain[2][1])
    assert store.journal_records == 0
    assert StateStore(str(state)).load() == versions[2]


def test_a_runtime_change_at_many_services_appends_a_small_record(tmp_path: Path) -> None:
    """What the journal is for: one endpoint moved among 2,000 backends appends its
    backend (not the 2 MB snapshot), and no new base is written."""
    versions = list(random_versions(1, 2, services=2000))
    chain = _chain(versions)
    state = tmp_path / "state"
    store = StateStore(str(state))
    store.save_held(chain[0][0])
    base = (state / "snapshot.binpb").stat()
    store.save_held(chain[1][0], chain[0][0], chain[1][1])
    assert (state / "snapshot.binpb").stat().st_mtime_ns == base.st_mtime_ns
    record = (state / "snapshot.journal").stat().st_size - journal.HEADER_SIZE
    assert 0 < record < base.st_size / 100
    assert StateStore(str(state)).load() == versions[1]


def test_a_new_base_is_written_without_a_second_copy_of_the_snapshot(tmp_path: Path) -> None:
    """A base (the first save, and every compaction: every `max_records` changes) is
    written from the held parts in order, not joined into one copy of the whole file
    first: at 8,000 Services that copy was 9 MB alive through the write and its fsync,
    resident until the next trim (docs/findings.md, "Agent memory: the config joined for
    its write"). The file is the snapshot's serialization, byte for byte, and loads."""
    held = _chain(list(random_versions(2, 1, services=5000)))[0][0]
    size = len(held.serialized())
    assert size > 3_000_000  # far above the write's buffer (`durable.PIECES_BUFFER`)
    state = tmp_path / "state"
    store = StateStore(str(state))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        store.save_held(held)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < size / 2, f"{peak:,} B alive while writing a {size:,} B base"
    assert (state / "snapshot.binpb").read_bytes() == held.serialized()
    loaded = StateStore(str(state)).load_held()
    assert loaded is not None and loaded.content_hash == held.content_hash
