"""A folder of Kubernetes YAML manifests as a source of cluster state.

Used by `controlplane compute`, the demo and the tests. A malformed file or object is
reported with its path and skipped; the rest of the folder still counts. Files are read
within the limits of `yamlload`. Two objects of the same kind, namespace and name are
reported with both paths, and the one from the file that sorts first is kept (as the
API server would have refused the second).

A change costs what changed: each file's parsed objects are kept (`ManifestIndex`), a pass
re-reads only the files that changed (by notification, or by identity: inode, size,
mtime), and the state is assembled from the kept objects, so objects of unchanged files
stay the same Python objects and the incremental `Computer` re-plans only what changed.
`FolderWatch` says what changed (watchfiles notifications, polling as fallback, a slow
rescan as a safety net).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.changes import ChangeLog
from controlplane.model import ClusterState, ObjectRef
from controlplane.source.convert import (
    DEFAULT_HAPROXY_SELECTOR,
    ManifestError,
    parse_selector,
    shown,
)
from controlplane.source.folder_walk import MANIFEST_SUFFIXES, Identity, internal, kind, walk
from controlplane.source.folder_watch import FolderWatch
from controlplane.source.kinds import BY_KIND, InputKind, InputObject
from controlplane.source.manifest_index import ManifestIndex, ParsedFile
from controlplane.source.yamlload import LoadError, load_file

log = logging.getLogger(__name__)

STALL_AFTER_S = 30.0
"""A pass running this long is stuck (a pass over 8,000 files takes about a second)."""


@dataclass(slots=True)
class LoadResult:
    state: ClusterState
    errors: list[str] = field(default_factory=list)


def manifest_files(directory: Path) -> list[Path]:
    """The manifest files under `directory`, as `folder_walk` finds them (links included
    only when they stay inside the folder, directory links never followed)."""
    return sorted(walk(directory).files)


def skipped_file(path: Path, reason: str) -> ParsedFile:
    """What the index holds for a skipped entry: its report, as an error of no object."""
    return ParsedFile(errors=((0, f"{path}: skipped: {reason}"),))


def _objects(documents: list[Any]) -> Iterator[tuple[str, Any]]:
    """(where, object) for every document of a file, `kind: List` items expanded (a List
    whose items are not a list is yielded whole, for `_convert` to report)."""
    for number, document in enumerate(documents, start=1):
        if isinstance(document, dict) and document.get("kind") == "List":
            items = document.get("items")
            if items is None or isinstance(items, list):
                for index, item in enumerate(items or []):
                    yield f"document {number} items[{index}]", item
                continue
        yield f"document {number}", document


def parse_file(path: Path) -> ParsedFile:
    """Everything `path` holds, converted; a file that cannot be read as YAML holds one
    error and no objects (a malformed file counts for nothing)."""
    try:
        documents = load_file(path)
    except LoadError as err:
        return ParsedFile(errors=((0, f"{path}: {err}"),))
    objects: list[tuple[int, str, InputObject]] = []
    errors: list[tuple[int, str]] = []
    for position, (where, document) in enumerate(_objects(documents)):
        try:
            converted = _convert(document)
        except ManifestError as err:
            errors.append((position, f"{path}: {where}: {err}"))
            continue
        except Exception as err:  # a converter bug must not cost the rest of the folder
            log.exception("%s: %s: unexpected error converting", path, where)
            errors.append((position, f"{path}: {where}: unexpected {type(err).__name__}"))
            continue
        if converted is not None:
            objects.append((position, where, converted))
    return ParsedFile(tuple(objects), tuple(errors))


def load_manifests(
    directory: Path,
    settings_ref: ObjectRef,
    haproxy_selector: str = DEFAULT_HAPROXY_SELECTOR,
) -> LoadResult:
    """Read every manifest under `directory` into a ClusterState."""
    if not directory.is_dir():
        return LoadResult(ClusterState(), [f"{directory}: not a directory"])
    index = ManifestIndex(settings_ref, parse_selector(haproxy_selector))
    found = walk(directory)
    for path in sorted(found.files):
        index.put(path, parse_file(path))
    for path, reason in found.skipped.items():
        index.put(path, skipped_file(path, reason))
    index.refresh()
    return LoadResult(index.state(), index.errors())


def _converted(document: dict[str, Any], row: InputKind[Any]) -> InputObject:
    converted: InputObject = row.convert(document)
    return converted


def _versioned(document: dict[str, Any], row: InputKind[Any]) -> InputObject | None:
    """The object of a document of a kind whose apiVersion counts; None for the same kind
    name in another group (Istio's networking.istio.io Gateway is not the Gateway API's).
    A manifest without apiVersion is taken as the kind's (as for the other kinds); a
    version the model does not read (networking.k8s.io/v1beta1 Ingress) is an error."""
    api_version = document.get("apiVersion")
    if api_version is None:
        return _converted(document, row)
    if not isinstance(api_version, str):
        raise ManifestError(f"apiVersion is not a string but {shown(api_version)}")
    group, _, version = api_version.rpartition("/")
    if group != row.group:
        return None
    if version not in (row.manifest_versions or ()):
        served = ", ".join(row.api_versions)
        raise ManifestError(
            f"{row.kind} apiVersion {shown(api_version)} is not read (use {served})"
        )
    return _converted(document, row)


def _convert(document: Any) -> InputObject | None:
    """The model object of a document; None for kinds the model does not read."""
    if not isinstance(document, dict):
        raise ManifestError("not a Kubernetes object (expected a map)")
    kind = document.get("kind")
    row = BY_KIND.get(kind) if isinstance(kind, str) else None
    if row is not None:
        if row.manifest_versions is None:
            return _converted(document, row)
        return _versioned(document, row)
    if kind == "List":  # one whose items _objects could not expand
        raise ManifestError(f"kind List: items is not a list but {shown(document.get('items'))}")
    if not isinstance(kind, str):
        raise ManifestError("kind is missing")
    # Other kinds (Deployment, DaemonSet...) carry nothing the model needs.
    return None


class FilesSource:
    """Source over a folder: loads it, then follows changes, re-reading only changed files.

    `parsed_files` counts the files read and parsed since creation (what a change cost)."""

    def __init__(
        self,
        directory: Path,
        settings_ref: ObjectRef,
        haproxy_selector: str = DEFAULT_HAPROXY_SELECTOR,
        poll_interval: float = 0.2,
        *,
        force_polling: bool | None = None,
        rescan_interval: float = 10.0,
        on_parsed: Callable[[int], None] | None = None,
        stall_after_s: float = STALL_AFTER_S,
    ) -> None:
        self._directory = directory
        self._stall_after_s = stall_after_s
        self._pass_since: float | None = None  # monotonic start of the pass in progress
        self._poll_interval = poll_interval
        self._force_polling = force_polling
        self._rescan_interval = rescan_interval
        self._on_parsed = on_parsed
        self._index = ManifestIndex(settings_ref, parse_selector(haproxy_selector))
        self._identities: dict[Path, Identity] = {}
        self._directories: set[Path] = {directory}
        self._paths: dict[str, Path] = {}  # the last walk's Paths, reused by the next
        self._skipped: dict[Path, str] = {}  # entries skipped, reported as errors
        self._roots = (Path(os.path.abspath(directory)), directory.resolve())
        self._pass_lock = threading.Lock()  # one pass at a time
        self._lock = threading.Lock()  # guards _result, read from other threads
        self._result = LoadResult(ClusterState())
        self._changes = ChangeLog()  # what each refresh changed, until `state()` hands it
        self._watch: FolderWatch | None = None
        self.parsed_files = 0

    def refresh(self, paths: set[Path] | None = None) -> bool:
        """One pass: re-read the files among `paths` (every changed file when None, found
        by identity); True when the state or the errors changed."""
        with self._pass_lock:
            self._pass_since = time.monotonic()
            try:
                return self._refresh(paths)
            finally:
                self._pass_since = None

    def stalled(self) -> str:
        """Why the source is stuck, "" when it is not: a pass running longer than
        `stall_after_s` (a read that blocks) leaves edits unseen while the last state
        is served, so `serve` turns health NOT_SERVING with this reason."""
        since = self._pass_since
        if since is None:
            return ""
        running = time.monotonic() - since
        if running < self._stall_after_s:
            return ""
        return f"files source {self._directory}: one pass has been running for {running:.0f} s"

    def _refresh(self, paths: set[Path] | None) -> bool:
        local = None if paths is None else self._local(paths)
        if local is None or self._needs_scan(local):
            self._rescan()
        else:
            for path in sorted(local):
                if path.suffix in MANIFEST_SUFFIXES:
                    self._reread(path)
        if not self._index.refresh():
            return False
        result = LoadResult(self._index.state(), self._index.errors())
        with self._lock:
            changed = result.state != self._result.state or result.errors != self._result.errors
            self._result = result
            self._changes.record(self._index.changed())
        return changed

    def _local(self, paths: set[Path]) -> set[Path] | None:
        """`paths` (absolute, as notifications name them) as `manifest_files` names them,
        under the folder as it was given; None when one is not under it."""
        local = set()
        for path in paths:
            for root in self._roots:
                if path.is_relative_to(root):
                    local.add(self._directory / path.relative_to(root))
                    break
            else:
                return None
        # A link, or a path through `..data` (a ConfigMap volume's swap): which file it
        # stands for is decided by the walk's rules, so scan again.
        if any(path.is_symlink() or any(internal(part) for part in path.parts) for path in local):
            return None
        return local

    def _needs_scan(self, paths: set[Path]) -> bool:
        """Whether a notification names a directory (new, moved or removed): the files
        under it are only known by scanning again."""
        return any(path in self._directories or path.is_dir() for path in paths)

    def _rescan(self) -> None:
        if not self._directory.is_dir():
            self._identities.clear()
            self._skipped.clear()
            for path in self._index.paths():
                self._index.remove(path)
            self._index.put(
                self._directory, ParsedFile(errors=((0, f"{self._directory}: not a directory"),))
            )
            return
        self._index.remove(self._directory)
        try:
            found = walk(self._directory, self._paths)
        except OSError as err:  # the folder itself cannot be listed: keep what was read
            log.warning("files source %s: cannot list: %s", self._directory, err)
            return
        files, self._directories, self._paths = found.files, found.directories, found.paths
        for path in [p for p in self._skipped if p not in found.skipped]:
            self._index.remove(path)
        for path in [p for p in self._identities if p not in files]:
            del self._identities[path]
            self._index.remove(path)
        self._skipped = {}
        for path, reason in found.skipped.items():
            self._skip(path, reason)
        for path, identity in files.items():
            if self._identities.get(path) != identity:
                self._read(path, identity)

    def _reread(self, path: Path) -> None:
        """Read `path` again whatever its identity (a notification said it changed); what
        is no longer there is dropped, what is not a regular file skipped as a walk would."""
        try:
            found = path.stat()
        except OSError:
            found = None
        if found is None or not stat.S_ISREG(found.st_mode):
            self._identities.pop(path, None)
            if found is None:
                self._skipped.pop(path, None)
                self._index.remove(path)
            else:
                self._skip(path, f"not a regular file ({kind(found.st_mode)})")
            return
        self._read(path, (found.st_ino, found.st_size, found.st_mtime_ns))

    def _skip(self, path: Path, reason: str) -> None:
        self._skipped[path] = reason
        self._index.put(path, skipped_file(path, reason))

    def _read(self, path: Path, identity: Identity) -> None:
        # The identity is taken before reading: a write racing the read is seen next pass.
        # Read, it is no longer skipped: a rescan must not drop it as a skip that ended.
        self._skipped.pop(path, None)
        self._index.put(path, parse_file(path))
        self._identities[path] = identity
        self.parsed_files += 1
        if self._on_parsed is not None:
            self._on_parsed(1)

    def start(self, on_change: Callable[[], None]) -> None:
        self.refresh()
        on_change()

        def on_changes(paths: set[Path] | None) -> None:
            if self.refresh(paths):
                on_change()

        self._watch = FolderWatch(
            self._directory,
            on_changes,
            force_polling=self._force_polling,
            poll_interval=self._poll_interval,
            rescan_interval=self._rescan_interval,
            directories=lambda: frozenset(self._directories),
        )
        self._watch.start()

    def state(self) -> ClusterState:
        """The state, with what changed since the last call (`ChangeSet`)."""
        with self._lock:
            return dataclasses.replace(self._result.state, changes=self._changes.stamp())

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._result.errors)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
