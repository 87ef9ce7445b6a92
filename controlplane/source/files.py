"""A folder of Kubernetes YAML manifests as a source of cluster state.

Used by `controlplane compute`, the demo and the tests. A malformed file is reported with
its path and skipped; the rest of the folder still counts. The folder is watched by
polling file metadata: small, dependency-free, and good enough for a folder of manifests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane.model import (
    DEFAULT_HAPROXY_SELECTOR,
    ClusterState,
    ConfigMap,
    EndpointSlice,
    ObjectRef,
    Pod,
    ReplicaSet,
    Service,
)
from controlplane.source.convert import (
    ManifestError,
    config_map_from,
    endpoint_slice_from,
    parse_selector,
    pod_from,
    replica_set_from,
    selector_matches,
    service_from,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(slots=True)
class LoadResult:
    state: ClusterState
    errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Collected:
    services: list[Service] = field(default_factory=list)
    slices: list[EndpointSlice] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    replica_sets: list[ReplicaSet] = field(default_factory=list)
    settings: ConfigMap | None = None


def manifest_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)


def _documents(path: Path) -> Iterator[Any]:
    """Every document of a file, expanding `kind: List` items."""
    text = path.read_text(encoding="utf-8")
    for document in yaml.safe_load_all(text):
        if isinstance(document, dict) and document.get("kind") == "List":
            yield from document.get("items") or []
        elif document is not None:
            yield document


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
            documents = list(_documents(path))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            errors.append(f"{path}: {_first_line(err)}")
            continue
        for number, document in enumerate(documents, start=1):
            try:
                _collect(document, collected, settings_ref, selector)
            except ManifestError as err:
                errors.append(f"{path}: document {number}: {err}")
    state = ClusterState(
        services=tuple(collected.services),
        endpoint_slices=tuple(collected.slices),
        haproxy_pods=tuple(collected.pods),
        replica_sets=tuple(collected.replica_sets),
        settings=collected.settings,
    )
    return LoadResult(state, errors)


def _first_line(err: Exception) -> str:
    return " ".join(str(err).split())[:300]


def _collect(
    document: Any,
    out: _Collected,
    settings_ref: ObjectRef,
    selector: tuple[tuple[str, str, str], ...],
) -> None:
    if not isinstance(document, dict):
        raise ManifestError("not a Kubernetes object (expected a map)")
    kind = document.get("kind")
    if kind == "Service":
        out.services.append(service_from(document))
    elif kind == "EndpointSlice":
        out.slices.append(endpoint_slice_from(document))
    elif kind == "Pod":
        pod = pod_from(document)
        if selector_matches(selector, pod.labels):
            out.pods.append(pod)
    elif kind == "ReplicaSet":
        out.replica_sets.append(replica_set_from(document))
    elif kind == "ConfigMap":
        config_map = config_map_from(document)
        if config_map.ref == settings_ref:
            out.settings = config_map
    elif not isinstance(kind, str):
        raise ManifestError("kind is missing")
    # Other kinds (Deployment, DaemonSet, Namespace...) carry nothing the model needs.


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

        def watch() -> None:
            nonlocal fingerprint
            while not self._stopped.wait(self._poll_interval):
                current = _fingerprint(self._directory)
                if current != fingerprint:
                    fingerprint = current
                    if self._reload():
                        on_change()

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
