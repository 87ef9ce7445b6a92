"""A folder of Kubernetes YAML manifests as a source of cluster state.

Used by `controlplane compute`, the demo and the tests. A malformed file or object is
reported with its path and skipped; the rest of the folder still counts. Files are read
within the limits of `yamlload`. Two objects of the same kind, namespace and name are
reported with both paths, and the one from the file that sorts first is kept (as the
API server would have refused the second). The folder is watched by polling file
metadata: small, dependency-free, and good enough for a folder of manifests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.model import (
    ClusterState,
    ConfigMap,
    EndpointSlice,
    ObjectRef,
    Pod,
    ReplicaSet,
    Service,
)
from controlplane.source.convert import (
    DEFAULT_HAPROXY_SELECTOR,
    ManifestError,
    config_map_from,
    endpoint_slice_from,
    parse_selector,
    pod_from,
    replica_set_from,
    selector_matches,
    service_from,
    shown,
)
from controlplane.source.yamlload import LoadError, load_file

log = logging.getLogger(__name__)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(slots=True)
class LoadResult:
    state: ClusterState
    errors: list[str] = field(default_factory=list)


Converted = Service | EndpointSlice | Pod | ReplicaSet | ConfigMap


@dataclass(slots=True)
class _Collected:
    services: list[Service] = field(default_factory=list)
    slices: list[EndpointSlice] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    replica_sets: list[ReplicaSet] = field(default_factory=list)
    settings: ConfigMap | None = None
    # (kind, namespace, name) -> where the kept object was read, to report duplicates.
    seen: dict[tuple[str, str, str], str] = field(default_factory=dict)


def manifest_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


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


def load_manifests(
    directory: Path,
    settings_ref: ObjectRef,
    haproxy_selector: str = DEFAULT_HAPROXY_SELECTOR,
) -> LoadResult:
    """Read every manifest under `directory` into a ClusterState."""
    selector = parse_selector(haproxy_selector)
    collected = _Collected()
    errors: list[str] = []
    if not directory.is_dir():
        return LoadResult(ClusterState(), [f"{directory}: not a directory"])
    for path in manifest_files(directory):
        try:
            documents = load_file(path)
        except LoadError as err:
            errors.append(f"{path}: {err}")
            continue
        for where, document in _objects(documents):
            try:
                converted = _convert(document)
            except ManifestError as err:
                errors.append(f"{path}: {where}: {err}")
                continue
            except Exception as err:  # a converter bug must not cost the rest of the folder
                log.exception("%s: %s: unexpected error converting", path, where)
                errors.append(f"{path}: {where}: unexpected {type(err).__name__}")
                continue
            if converted is not None:
                if (duplicate := _add(converted, f"{path} ({where})", collected)) is not None:
                    errors.append(duplicate)
                    continue
                _keep(converted, collected, settings_ref, selector)
    state = ClusterState(
        services=tuple(collected.services),
        endpoint_slices=tuple(collected.slices),
        haproxy_pods=tuple(collected.pods),
        replica_sets=tuple(collected.replica_sets),
        settings=collected.settings,
    )
    return LoadResult(state, errors)


def _convert(document: Any) -> Converted | None:
    """The model object of a document; None for kinds the model does not read."""
    if not isinstance(document, dict):
        raise ManifestError("not a Kubernetes object (expected a map)")
    kind = document.get("kind")
    if kind == "Service":
        return service_from(document)
    if kind == "EndpointSlice":
        return endpoint_slice_from(document)
    if kind == "Pod":
        return pod_from(document)
    if kind == "ReplicaSet":
        return replica_set_from(document)
    if kind == "ConfigMap":
        return config_map_from(document)
    if kind == "List":  # one whose items _objects could not expand
        raise ManifestError(f"kind List: items is not a list but {shown(document.get('items'))}")
    if not isinstance(kind, str):
        raise ManifestError("kind is missing")
    # Other kinds (Deployment, DaemonSet, Namespace...) carry nothing the model needs.
    return None


def _add(obj: Converted, where: str, out: _Collected) -> str | None:
    """None when `obj` is the first of its kind and name; else the duplicate's report."""
    key = (type(obj).__name__, obj.namespace, obj.name)
    kept = out.seen.setdefault(key, where)
    if kept == where:
        return None
    return f"duplicate {key[0]} {obj.namespace}/{obj.name}: {where} skipped, {kept} kept"


def _keep(
    obj: Converted,
    out: _Collected,
    settings_ref: ObjectRef,
    selector: tuple[tuple[str, str, str], ...],
) -> None:
    if isinstance(obj, Service):
        out.services.append(obj)
    elif isinstance(obj, EndpointSlice):
        out.slices.append(obj)
    elif isinstance(obj, Pod):
        if selector_matches(selector, obj.labels):
            out.pods.append(obj)
    elif isinstance(obj, ReplicaSet):
        out.replica_sets.append(obj)
    elif obj.ref == settings_ref:
        out.settings = obj


def _fingerprint(directory: Path) -> tuple[tuple[str, int, int], ...]:
    result = []
    for path in manifest_files(directory):
        try:
            stat = path.stat()
        except OSError:
            continue
        result.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(result)


class FilesSource:
    """Source over a folder: loads it, then polls it for changes."""

    def __init__(
        self,
        directory: Path,
        settings_ref: ObjectRef,
        haproxy_selector: str = DEFAULT_HAPROXY_SELECTOR,
        poll_interval: float = 0.2,
    ) -> None:
        self._directory = directory
        self._settings_ref = settings_ref
        self._selector = haproxy_selector
        self._poll_interval = poll_interval
        self._lock = threading.Lock()
        self._result = LoadResult(ClusterState())
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def _reload(self) -> bool:
        # Errors are reported through errors(); the reconcile loop logs each one once.
        result = load_manifests(self._directory, self._settings_ref, self._selector)
        with self._lock:
            changed = result.state != self._result.state or result.errors != self._result.errors
            self._result = result
        return changed

    def start(self, on_change: Callable[[], None]) -> None:
        fingerprint = _fingerprint(self._directory)
        self._reload()
        on_change()

        def poll() -> None:
            nonlocal fingerprint
            current = _fingerprint(self._directory)
            if current != fingerprint:
                fingerprint = current
                if self._reload():
                    on_change()

        def watch() -> None:
            while not self._stopped.wait(self._poll_interval):
                try:
                    poll()
                except Exception:  # the watch must outlive any one bad pass
                    log.exception("files source %s: poll failed; still watching", self._directory)

        self._thread = threading.Thread(target=watch, name="files-source", daemon=True)
        self._thread.start()

    def state(self) -> ClusterState:
        with self._lock:
            return self._result.state

    def errors(self) -> list[str]:
        with self._lock:
            return list(self._result.errors)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
