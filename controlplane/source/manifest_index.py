"""The objects of a manifests folder, kept per file, assembled into one ClusterState.

A folder of 2,000 files changes one file at a time. Each file's parsed objects are kept
(`ParsedFile`), so a pass re-reads only what changed; the state is assembled from the
per-file lists, so every object of an unchanged file is the very same Python object in
the next state (the incremental `Computer` finds changes by identity). Duplicates across
files (same kind, namespace and name) are resolved by claims per key: the file that sorts
first wins, then the first document; a change re-derives only the files that claim a key
the changed file claims(ed). Pure bookkeeping, no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import Any, TypeVar

from controlplane.model import ClusterState, NamespacedObject, ObjectRef, Pod
from controlplane.source.convert import selector_matches
from controlplane.source.kinds import BY_MODEL, INPUT_KINDS, InputKind, InputObject, Selection

Key = tuple[str, str, str]
"""(kind, namespace, name): what two objects must not share."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """What one file holds, in document order: `objects` as (position, where, object) and
    `errors` as (position, line); positions interleave the two as the file had them."""

    objects: tuple[tuple[int, str, InputObject], ...] = ()
    errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _View:
    """What one file contributes to the state once duplicates are resolved: its objects
    by ClusterState field (a field it has none of is absent)."""

    objects: Mapping[str, tuple[InputObject, ...]] = field(default_factory=dict)
    errors: tuple[str, ...] = ()


@dataclass(order=True, frozen=True, slots=True)
class _Claim:
    path: Path
    position: int
    where: str = field(compare=False)


def key_of(obj: InputObject) -> Key:
    """Cluster-scoped kinds (GatewayClass, IngressClass, Namespace) have namespace ""."""
    return (BY_MODEL[type(obj)].kind, getattr(obj, "namespace", ""), obj.name)


class ManifestIndex:
    """Per-file objects of a folder; `put`/`remove` a file, then `state()`/`errors()`."""

    def __init__(self, settings_ref: ObjectRef, selector: tuple[tuple[str, str, str], ...]):
        self._settings_ref = settings_ref
        self._selector = selector
        self._files: dict[Path, ParsedFile] = {}
        self._views: dict[Path, _View] = {}
        self._claims: dict[Key, list[_Claim]] = {}  # sorted: the kept object first
        self._order: list[Path] | None = []  # sorted paths; None when a file came or went
        # The views and their `objects` in `_order`, and each path's position there: a
        # refresh after an edit swaps the edited files' entries instead of looking every
        # path up again (hashing 8,000 Paths per change).
        self._ordered: list[_View] = []
        self._found: list[Mapping[str, tuple[InputObject, ...]]] = []
        self._position: dict[Path, int] = {}
        # Each list field's joined tuple, and where each file's objects start in it (made
        # when first needed, dropped when a file's count in that field changes): an edit
        # that keeps its counts is spliced in, not joined again from 8,000 views.
        self._joined: dict[str, tuple[InputObject, ...]] = {}
        self._starts: dict[str, dict[Path, int]] = {}
        self._stale: set[Path] = set()  # files whose view must be derived again
        self._state = ClusterState()
        self._errors: tuple[str, ...] = ()
        self._removed: list[_View] = []  # views of files removed since the last refresh
        self._changed: dict[Key, InputObject | None] = {}

    def __contains__(self, path: Path) -> bool:
        return path in self._files

    def paths(self) -> list[Path]:
        return list(self._files)

    def put(self, path: Path, parsed: ParsedFile) -> bool:
        """Record what `path` holds now; False when that is what it held (its old objects,
        equal, stay: same identity)."""
        old = self._files.get(path)
        if old == parsed:
            return False
        if old is None:
            self._order = None
        else:
            self._unclaim(path, old)
            parsed = _reusing(old, parsed)
        self._files[path] = parsed
        self._claim(path, parsed)
        return True

    def remove(self, path: Path) -> bool:
        """Forget `path`; False when it was not known."""
        old = self._files.pop(path, None)
        if old is None:
            return False
        self._unclaim(path, old)
        view = self._views.pop(path, None)
        if view is not None:
            self._removed.append(view)
        self._stale.discard(path)
        self._order = None
        return True

    def _claim(self, path: Path, parsed: ParsedFile) -> None:
        self._stale.add(path)
        for position, where, obj in parsed.objects:
            claims = self._claims.setdefault(key_of(obj), [])
            bisect.insort(claims, _Claim(path, position, where))
            self._stale.update(claim.path for claim in claims)

    def _unclaim(self, path: Path, parsed: ParsedFile) -> None:
        for _, _, obj in parsed.objects:
            key = key_of(obj)
            claims = [c for c in self._claims.get(key, ()) if c.path != path]
            self._stale.update(claim.path for claim in claims)
            if claims:
                self._claims[key] = claims
            else:
                self._claims.pop(key, None)

    def _derive(self, path: Path) -> _View:
        parsed = self._files[path]
        objects: dict[str, list[InputObject]] = {}
        errors: list[tuple[int, str]] = list(parsed.errors)
        for position, where, obj in parsed.objects:
            kept = self._claims[key_of(obj)][0]
            if kept.path != path or kept.position != position:
                kind, namespace, name = key_of(obj)
                errors.append(
                    (
                        position,
                        f"duplicate {kind} {namespace}/{name}: {path} ({where}) skipped, "
                        f"{kept.path} ({kept.where}) kept",
                    )
                )
                continue
            row = BY_MODEL[type(obj)]
            if self._keeps(row, obj):
                objects.setdefault(row.field, []).append(obj)
        errors.sort(key=lambda error: error[0])
        return _View(
            {name: tuple(found) for name, found in objects.items()},
            tuple(line for _, line in errors),
        )

    def _keeps(self, row: InputKind[Any], obj: InputObject) -> bool:
        """Whether the folder keeps an object of `row` (the pods the HAProxy selector
        matches, the settings ConfigMap; every other object)."""
        if row.selection is Selection.HAPROXY_PODS:
            assert isinstance(obj, Pod)
            return selector_matches(self._selector, obj.labels)
        if row.selection is Selection.SETTINGS:
            return isinstance(obj, NamespacedObject) and obj.ref == self._settings_ref
        return True

    def refresh(self) -> bool:
        """Assemble the state again if any file changed since; True when it did. Costs one
        derivation per changed file (and per file sharing a key with one), plus joining
        the per-file tuples of the fields those files hold or held (in C) or, when the
        derived files hold as many objects of a field as before (and no file came or
        went), splicing theirs in; the other fields, and the errors while no derived
        file's changed and no file came or went, keep their tuples."""
        self._changed = {}
        if not self._stale and self._order is not None:
            return False
        touched: set[str] = set()
        before_views, self._removed = self._removed, []
        for gone in before_views:  # the fields a removed file held move too
            touched.update(gone.objects)
        after_views: list[_View] = []
        derived = list(self._stale)
        errors_moved = False
        edits: list[tuple[Path, _View | None, _View]] = []
        for path in derived:
            before = self._views.get(path)
            self._views[path] = view = self._derive(path)
            after_views.append(view)
            edits.append((path, before, view))
            touched.update(view.objects)
            errors_moved = errors_moved or before is None or before.errors != view.errors
            if before is not None:
                before_views.append(before)
                touched.update(before.objects)
        self._stale.clear()
        self._changed = _differing(before_views, after_views)
        # A file came or went: the order and every field's layout move, but only the
        # fields such files (or the derived ones) hold are joined again; the others keep
        # their tuples, so a consumer comparing inputs by identity sees them unchanged.
        whole = self._order is None
        if self._order is None:
            self._starts = {}
            self._order = sorted(self._files)
            self._position = {path: index for index, path in enumerate(self._order)}
            self._ordered = list(map(self._views.__getitem__, self._order))
            self._found = list(map(attrgetter("objects"), self._ordered))
        else:  # the same files: only the derived ones' entries move
            for path, view in zip(derived, after_views, strict=True):
                index = self._position[path]
                self._ordered[index], self._found[index] = view, view.objects
        # map() with methodcaller keeps these joins in C: at 8,000 files a generator
        # expression per kind cost more than the changed file's parse.
        views, found = self._ordered, self._found
        fields: dict[str, Any] = {}
        for row in INPUT_KINDS:
            if row.field in touched or row.field not in self._joined:
                joined = None if whole else self._spliced(row.field, edits)
                if joined is None:
                    joined = _joined(map(methodcaller("get", row.field, ()), found))
                    self._starts.pop(row.field, None)
                self._joined[row.field] = joined
                single = row.selection is Selection.SETTINGS
                fields[row.field] = (joined[0] if joined else None) if single else joined
        self._state = dataclasses.replace(self._state, **fields)
        if whole or errors_moved:
            self._errors = _joined(map(attrgetter("errors"), views))
        return True

    def _spliced(
        self, name: str, edits: list[tuple[Path, _View | None, _View]]
    ) -> tuple[InputObject, ...] | None:
        """Field `name` joined again by putting the edited files' objects where theirs
        were; None when an edit changed how many it holds (or a file is new): join."""
        joined = self._joined.get(name)
        if joined is None:
            return None
        for _, before, after in edits:
            if before is None or len(before.objects.get(name, ())) != len(
                after.objects.get(name, ())
            ):
                return None
        starts = self._starts.get(name)
        if starts is None:  # once per layout: where each file's objects start
            starts, at = {}, 0
            for path, held in zip(self._order or (), self._found, strict=True):
                starts[path] = at
                at += len(held.get(name, ()))
            self._starts[name] = starts
        spliced = list(joined)
        for path, _, after in edits:
            own = after.objects.get(name, ())
            at = starts[path]
            spliced[at : at + len(own)] = own
        return tuple(spliced)

    def state(self) -> ClusterState:
        """The state as of the last `refresh`."""
        return self._state

    def changed(self) -> dict[Key, InputObject | None]:
        """The objects the last `refresh` changed, by key, with their object in the state
        (None: gone); an object of a re-read file that stayed the same is not among them."""
        return self._changed

    def errors(self) -> list[str]:
        """Every file's errors as of the last `refresh`, by path, then document order."""
        return list(self._errors)


def _reusing(old: ParsedFile, new: ParsedFile) -> ParsedFile:
    """`new` with each object that equals the old one of its key replaced by that old one:
    an edit to one object of a file leaves the file's other objects identical."""
    previous = {key_of(obj): obj for _, _, obj in old.objects}
    objects: list[tuple[int, str, InputObject]] = []
    for position, where, obj in new.objects:
        before = previous.get(key_of(obj))
        objects.append((position, where, before if before is not None and before == obj else obj))
    return ParsedFile(tuple(objects), new.errors)


def _differing(before: list[_View], after: list[_View]) -> dict[Key, InputObject | None]:
    """The keys whose kept object differs between the views of the files a refresh
    derived again (before: as they were, and the removed files'; after: as derived now).
    Every file claiming a changed key is derived again, so the key's winner is among them."""
    old = {key_of(obj): obj for view in before for objs in view.objects.values() for obj in objs}
    new = {key_of(obj): obj for view in after for objs in view.objects.values() for obj in objs}
    return {
        key: new.get(key) for key in old.keys() | new.keys() if old.get(key) is not new.get(key)
    }


def _joined(parts: Iterable[tuple[T, ...]]) -> tuple[T, ...]:
    return tuple(chain.from_iterable(parts))
