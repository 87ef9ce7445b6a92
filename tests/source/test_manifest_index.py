"""The manifest index assembles, after any sequence of file changes, the very state and
errors a fresh index of the same files assembles: re-joining only the fields the changed
files hold (or held) loses nothing and keeps nothing stale."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.model import (
    ConfigMap,
    Namespace,
    ObjectRef,
    OwnerRef,
    Pod,
    Service,
    ServicePort,
    TLSSecret,
    frozen_map,
)
from controlplane.source.convert import DEFAULT_HAPROXY_SELECTOR, parse_selector
from controlplane.source.kinds import INPUT_KINDS, Selection
from controlplane.source.manifest_index import ManifestIndex, ParsedFile, key_of

SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
SELECTOR = parse_selector(DEFAULT_HAPROXY_SELECTOR)
HAPROXY = frozen_map({"app.kubernetes.io/component": "haproxy"})
POOL = (
    Service("a", "web", (ServicePort("http", 80),)),
    Service("a", "web", (ServicePort("http", 81),)),  # a duplicate key, other content
    Service("b", "db", (ServicePort("", 5432),)),
    Pod(
        "haproxy-system",
        "haproxy-0",
        "10.0.0.1",
        "Running",
        OwnerRef("DaemonSet", "h"),
        labels=HAPROXY,
    ),
    Pod("haproxy-system", "other", "10.0.0.2", "Running", None),
    ConfigMap("haproxy-system", "haproxy-settings", frozen_map({"load-balance": "source"})),
    ConfigMap("haproxy-system", "something-else"),
    Namespace("a", frozen_map({"team": "a"})),
    TLSSecret("a", "cert"),
)
PATHS = tuple(Path(f"/m/{name}.yaml") for name in ("a", "b", "c"))
files = st.lists(st.sampled_from(range(len(POOL))), max_size=4).map(
    lambda picks: ParsedFile(
        tuple((n, f"document {n + 1}", POOL[i]) for n, i in enumerate(picks)),
        ((len(picks), "an error line"),) if len(picks) == 3 else (),
    )
)
changes = st.lists(
    st.tuples(st.sampled_from(PATHS), st.one_of(st.none(), files)), min_size=1, max_size=12
)


def fresh(current: dict[Path, ParsedFile]) -> ManifestIndex:
    index = ManifestIndex(SETTINGS, SELECTOR)
    for path, parsed in current.items():
        index.put(path, parsed)
    index.refresh()
    return index


@settings(max_examples=300, deadline=None)
@given(changes)
def test_any_sequence_of_changes_assembles_what_a_fresh_index_does(
    steps: list[tuple[Path, ParsedFile | None]],
) -> None:
    index = ManifestIndex(SETTINGS, SELECTOR)
    current: dict[Path, ParsedFile] = {}
    for path, parsed in steps:
        if parsed is None:
            index.remove(path)
            current.pop(path, None)
        else:
            index.put(path, parsed)
            current[path] = parsed
        index.refresh()
        expected = fresh(current)
        assert index.state() == expected.state()
        assert index.errors() == expected.errors()


def _by_key(index: ManifestIndex) -> dict[tuple[str, str, str], object]:
    """Every object of the index's state by (kind, namespace, name)."""
    state = index.state()
    found: dict[tuple[str, str, str], object] = {}
    for row in INPUT_KINDS:
        value = getattr(state, row.field)
        objects = (
            (() if value is None else (value,)) if row.selection is Selection.SETTINGS else value
        )
        found.update((key_of(obj), obj) for obj in objects)
    return found


@settings(max_examples=300, deadline=None)
@given(changes)
def test_each_refresh_reports_exactly_the_objects_it_changed(
    steps: list[tuple[Path, ParsedFile | None]],
) -> None:
    """`changed()` (what the folder source hands as the state's ChangeSet) is the keys
    whose object in the state differs from the state before, with the object now (None:
    gone), duplicates and filtered kinds included, and no other key."""
    index = ManifestIndex(SETTINGS, SELECTOR)
    before: dict[tuple[str, str, str], object] = {}
    for path, parsed in steps:
        if parsed is None:
            index.remove(path)
        else:
            index.put(path, parsed)
        index.refresh()
        after = _by_key(index)
        expected = {
            key: after.get(key)
            for key in before.keys() | after.keys()
            if before.get(key) is not after.get(key)
        }
        assert index.changed() == expected
        before = after


class _CountingViews(dict):  # type: ignore[type-arg]
    """The index's per-path views, counting the lookups of every file's view."""

    lookups = 0

    def __getitem__(self, path: Path) -> object:
        _CountingViews.lookups += 1
        return super().__getitem__(path)


def test_an_edit_of_one_file_looks_up_no_other_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 8,000 files a refresh that looked every file's view up again (hashing each Path)
    and joined every file's objects of the edited kinds again cost more than the edited
    file's parse (~10 ms): an edit of an existing file that keeps its counts swaps its
    own entries and splices its objects in, and the state is what a fresh index
    assembles."""
    names = [f"s{i}" for i in range(50)]
    current = {
        Path(f"/m/{name}.yaml"): ParsedFile(((0, "document 1", Service("a", name, ())),))
        for name in names
    }
    index = fresh(current)
    index._views = _CountingViews(index._views)
    edited = Path("/m/s7.yaml")
    current[edited] = ParsedFile(((0, "document 1", Service("a", "s7", (ServicePort("", 1),))),))
    index.put(edited, current[edited])
    _CountingViews.lookups = 0
    assert index.refresh()
    assert _CountingViews.lookups == 0
    expected = fresh(current)
    assert index.state() == expected.state() and index.errors() == expected.errors()

    def joined(*_: object) -> None:
        raise AssertionError("every file's objects joined again")

    monkeypatch.setattr("controlplane.source.manifest_index._joined", joined)
    for name, port in (("s7", 2), ("s30", 3)):  # the same count of Services each
        path = Path(f"/m/{name}.yaml")
        current[path] = ParsedFile(
            ((0, "document 1", Service("a", name, (ServicePort("", port),))),)
        )
        index.put(path, current[path])
        assert index.refresh()
    monkeypatch.undo()
    expected = fresh(current)
    assert index.state() == expected.state() and index.errors() == expected.errors()


def test_a_file_that_comes_or_goes_keeps_the_other_kinds_tuples() -> None:
    """The route computation compares its inputs by identity: a new HTTPRoute file must
    not hand it a new tuple of Ingresses (or of any kind the file does not hold), or every
    route added in a folder recomputes the route table from scratch (found in the route
    propagation benchmark at 10,000 routes). A file that goes moves the kinds it held."""
    service = Service("a", "web", (ServicePort("http", 80),))
    namespace = Namespace("a", frozen_map({"team": "a"}))
    current = {
        Path("/m/web.yaml"): ParsedFile(((0, "document 1", service),)),
        Path("/m/ns.yaml"): ParsedFile(((0, "document 1", namespace),)),
    }
    index = fresh(current)
    before = index.state()
    added = Path("/m/db.yaml")
    current[added] = ParsedFile(((0, "document 1", Service("b", "db", ())),))
    index.put(added, current[added])
    assert index.refresh()
    after = index.state()
    assert after.namespaces is before.namespaces
    assert after.services is not before.services and len(after.services) == 2
    index.remove(Path("/m/ns.yaml"))
    del current[Path("/m/ns.yaml")]
    assert index.refresh()
    gone = index.state()
    assert gone.namespaces == () and gone.services is after.services
    expected = fresh(current)
    assert gone == expected.state() and index.errors() == expected.errors()
