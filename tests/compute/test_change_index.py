"""The change index (controlplane/compute/change_index.py): fed with a source's change keys
it computes exactly what the full identity diff computes, and what a fresh computation
gives, for any sequence of changes; a state it cannot place falls back to the diff."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.changes import ChangeLog
from controlplane.compute import Computer, compute
from controlplane.model import ClusterState, EndpointSlice, ObjectRef, Service
from controlplane.source.files import FilesSource
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service

NAMES = ("a", "b", "c", "d")
HOSTS = ("one.example.com", "two.example.com")
DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "demo"
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
PODS = (haproxy_pod("haproxy-a", "127.0.1.1"), haproxy_pod("haproxy-b", "127.0.1.2"))


class FakeSource:
    """A source as the real ones are: unchanged objects stay the same objects, each
    change is recorded by key, and each state carries the changes since the one before."""

    def __init__(self) -> None:
        self.services: dict[tuple[str, str], Service] = {}
        self.slices: dict[tuple[str, str], EndpointSlice] = {}
        self.log = ChangeLog()

    def put(self, obj: Service | EndpointSlice | None, kind: str, key: tuple[str, str]) -> None:
        into: dict = self.services if kind == "Service" else self.slices  # type: ignore[type-arg]
        if obj is None:
            into.pop(key, None)
        else:
            into[key] = obj
        self.log.record({(kind, *key): obj})

    def state(self) -> ClusterState:
        plain = cluster(self.services.values(), self.slices.values(), PODS)
        return dataclasses.replace(plain, changes=self.log.stamp())


# One change: a Service (present or not, host, tcp port, creation day), or one of its two
# slices (present or not, endpoints), or the source handing a state the computer never
# sees (the next ChangeSet cannot be placed), or the last state again.
service_change = st.tuples(
    st.just("service"),
    st.sampled_from(NAMES),
    st.booleans(),
    st.one_of(st.none(), st.integers(0, len(HOSTS) - 1)),
    st.one_of(st.none(), st.sampled_from([9000, 9001])),
    st.integers(1, 3),
)
slice_change = st.tuples(
    st.just("slice"),
    st.sampled_from(NAMES),
    st.integers(1, 2),
    st.booleans(),
    st.sets(st.integers(1, 9), max_size=4),
)
changes = st.lists(
    st.one_of(service_change, slice_change, st.just(("unseen",)), st.just(("again",))),
    max_size=25,
)


def _apply(source: FakeSource, change: tuple) -> None:  # type: ignore[type-arg]
    if change[0] == "service":
        _, name, present, host, tcp, day = change
        notes: dict[str, str] = {}
        if host is not None:
            notes["haproxy.org/hosts"] = HOSTS[host]
        if tcp is not None:
            notes["haproxy.org/tcp-port"] = str(tcp)
        made = service(name, annotations=notes, created=f"2026-01-0{day}T00:00:00Z")
        source.put(made if present else None, "Service", ("default", name))
    else:
        _, name, number, present, endpoints = change
        addresses = [f"127.0.7.{n}" for n in sorted(endpoints)]
        slice_name = f"{name}-{number}"
        made_slice = endpoint_slice(name, addresses, name=slice_name)
        source.put(made_slice if present else None, "EndpointSlice", ("default", slice_name))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(start=st.lists(service_change, max_size=4), steps=changes)
def test_the_change_index_computes_what_the_full_diff_computes(
    start: list[tuple],  # type: ignore[type-arg]
    steps: list[tuple],  # type: ignore[type-arg]
) -> None:
    """At every step the Computer fed ChangeSets equals one fed states without them (the
    full diff) and a fresh computation; it diffs only when it cannot place a ChangeSet."""
    source = FakeSource()
    for change in start:
        _apply(source, change)
    keyed, diffing = Computer(), Computer()
    previous: dict = {}  # type: ignore[type-arg]
    state = source.state()
    expected_diffs = 1  # the first state: nothing to be relative to
    unseen = False
    for step in [("again",), *steps]:
        if step[0] == "unseen":
            source.state()  # handed to no one: the next ChangeSet is relative to it
            unseen = True
            continue
        if step[0] != "again":
            _apply(source, step)
            state = source.state()
            expected_diffs += unseen
            unseen = False
        incremental = keyed.compute(state, previous)
        full = diffing.compute(dataclasses.replace(state, changes=None), previous)
        fresh = compute(state, previous)
        assert incremental.workloads == full.workloads == fresh.workloads
        assert incremental.rejections == full.rejections == fresh.rejections
        assert dict(incremental.assignment) == dict(full.assignment) == dict(fresh.assignment)
        previous = dict(incremental.assignment)
    assert keyed._plans.index.diffed == expected_diffs


def test_an_endpoint_change_costs_its_keys_not_a_diff() -> None:
    """One slice changed: the Computer fed its key re-plans that Service only, without
    a full diff (the diff count stays at the first computation's)."""
    source = FakeSource()
    for name in NAMES:
        _apply(source, ("service", name, True, None, None, 1))
        _apply(source, ("slice", name, 1, True, {1, 2}))
    computer = Computer()
    result = computer.compute(source.state(), {})
    _apply(source, ("slice", "b", 1, True, {3}))
    changed = computer.compute(source.state(), result.assignment)
    assert computer._plans.index.diffed == 1
    assert computer.planned == 1
    assert changed.assignment != result.assignment


def test_a_state_replaced_from_a_stamped_one_is_diffed() -> None:
    """A state made with `dataclasses.replace` from a stamped one carries a ChangeSet
    that is not its own: the index sees its counts differ and diffs instead."""
    source = FakeSource()
    _apply(source, ("service", "a", True, None, None, 1))
    _apply(source, ("slice", "a", 1, True, {1}))
    computer = Computer()
    computer.compute(source.state(), {})
    _apply(source, ("service", "b", True, None, None, 1))
    stamped = source.state()
    extra = endpoint_slice("b", ["127.0.7.5"], name="b-1")
    replaced = dataclasses.replace(stamped, endpoint_slices=(*stamped.endpoint_slices, extra))
    result = computer.compute(replaced, {})
    assert result.workloads == compute(replaced, {}).workloads
    assert computer._plans.index.diffed == 2


def test_the_folder_source_feeds_the_change_index(tmp_path: Path) -> None:
    """A real source's ChangeSets are placed: after the first state, an edited and a
    removed file cost no diff, and the results equal a fresh computation."""
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    source = FilesSource(folder, SETTINGS)
    source.refresh()
    computer = Computer()
    result = computer.compute(source.state(), {})
    (folder / "db.yaml").unlink()
    shop = folder / "shop.yaml"
    shop.write_text(shop.read_text().replace("127.0.2.3", "127.0.2.9"))
    assert source.refresh()
    state = source.state()
    after = computer.compute(state, result.assignment)
    assert computer._plans.index.diffed == 1
    assert after.workloads == compute(state, result.assignment).workloads
    assert {s.name for s in state.services} == {"shop", "catalog"}
    assert computer.planned == 1  # shop: an endpoint moved (db's plan went, unplanned)
