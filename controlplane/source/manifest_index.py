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
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import TypeVar

from controlplane.model import (
    ClusterState,
    ConfigMap,
    EndpointSlice,
    Gateway,
    GatewayClass,
    HTTPRoute,
    Ingress,
    IngressClass,
    Namespace,
    ObjectRef,
    Pod,
    ReferenceGrant,
    ReplicaSet,
    Service,
    TCPRoute,
    TLSRoute,
    TLSSecret,
)
from controlplane.source.convert import selector_matches

RouteObject = (
    GatewayClass
    | Gateway
    | HTTPRoute
    | ReferenceGrant
    | Ingress
    | IngressClass
    | Namespace
    | TLSRoute
    | TCPRoute
    | TLSSecret
)
"""The route model's kinds (and the Secrets they name): kept as they are, each in its own
ClusterState field."""
Converted = Service | EndpointSlice | Pod | ReplicaSet | ConfigMap | RouteObject
ROUTE_FIELDS: dict[type, str] = {
    GatewayClass: "gateway_classes",
    Gateway: "gateways",
    HTTPRoute: "http_routes",
    ReferenceGrant: "reference_grants",
    Ingress: "ingresses",
    IngressClass: "ingress_classes",
    Namespace: "namespaces",
    TLSRoute: "tls_routes",
    TCPRoute: "tcp_routes",
    TLSSecret: "secrets",
}
"""The ClusterState (and `_View`) field of each route kind."""
Key = tuple[str, str, str]
"""(kind, namespace, name): what two objects must not share."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ParsedFile:
    """What one file holds, in document order: `objects` as (position, where, object) and
    `errors` as (position, line); positions interleave the two as the file had them."""

    objects: tuple[tuple[int, str, Converted], ...] = ()
    errors: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _View:
    """What one file contributes to the state once duplicates are resolved."""

    services: tuple[Service, ...] = ()
    slices: tuple[EndpointSlice, ...] = ()
    pods: tuple[Pod, ...] = ()
    replica_sets: tuple[ReplicaSet, ...] = ()
    settings: tuple[ConfigMap, ...] = ()
    errors: tuple[str, ...] = ()
    gateway_classes: tuple[GatewayClass, ...] = ()
    gateways: tuple[Gateway, ...] = ()
    http_routes: tuple[HTTPRoute, ...] = ()
    reference_grants: tuple[ReferenceGrant, ...] = ()
    ingresses: tuple[Ingress, ...] = ()
    ingress_classes: tuple[IngressClass, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    tls_routes: tuple[TLSRoute, ...] = ()
    tcp_routes: tuple[TCPRoute, ...] = ()
    secrets: tuple[TLSSecret, ...] = ()


@dataclass(order=True, frozen=True, slots=True)
class _Claim:
    path: Path
    position: int
    where: str = field(compare=False)


KIND_NAMES: dict[type, str] = {TLSSecret: "Secret"}
"""The Kubernetes kind of a model type named otherwise (a duplicate names the kind)."""


def key_of(obj: Converted) -> Key:
    """Cluster-scoped kinds (GatewayClass, IngressClass, Namespace) have namespace ""."""
    kind = KIND_NAMES.get(type(obj)) or type(obj).__name__
    return (kind, getattr(obj, "namespace", ""), obj.name)


class ManifestIndex:
    """Per-file objects of a folder; `put`/`remove` a file, then `state()`/`errors()`."""

    def __init__(self, settings_ref: ObjectRef, selector: tuple[tuple[str, str, str], ...]):
        self._settings_ref = settings_ref
        self._selector = selector
        self._files: dict[Path, ParsedFile] = {}
        self._views: dict[Path, _View] = {}
        self._claims: dict[Key, list[_Claim]] = {}  # sorted: the kept object first
        self._order: list[Path] | None = []  # sorted paths; None when a file came or went
        self._stale: set[Path] = set()  # files whose view must be derived again
        self._state = ClusterState()
        self._errors: tuple[str, ...] = ()

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
        self._views.pop(path, None)
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
        services: list[Service] = []
        slices: list[EndpointSlice] = []
        pods: list[Pod] = []
        replica_sets: list[ReplicaSet] = []
        settings: list[ConfigMap] = []
        routes: dict[str, list[RouteObject]] = {}
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
            elif isinstance(obj, Service):
                services.append(obj)
            elif isinstance(obj, EndpointSlice):
                slices.append(obj)
            elif isinstance(obj, Pod):
                if selector_matches(self._selector, obj.labels):
                    pods.append(obj)
            elif isinstance(obj, ReplicaSet):
                replica_sets.append(obj)
            elif isinstance(obj, ConfigMap):
                if obj.ref == self._settings_ref:
                    settings.append(obj)
            else:
                routes.setdefault(ROUTE_FIELDS[type(obj)], []).append(obj)
        errors.sort(key=lambda error: error[0])
        return _View(
            tuple(services),
            tuple(slices),
            tuple(pods),
            tuple(replica_sets),
            tuple(settings),
            tuple(line for _, line in errors),
            **{name: tuple(objects) for name, objects in routes.items()},  # type: ignore[arg-type]
        )

    def refresh(self) -> bool:
        """Assemble the state again if any file changed since; True when it did. Costs one
        derivation per changed file (and per file sharing a key with one), plus joining
        the per-file tuples."""
        if not self._stale and self._order is not None:
            return False
        for path in self._stale:
            self._views[path] = self._derive(path)
        self._stale.clear()
        if self._order is None:
            self._order = sorted(self._files)
        # map() with attrgetter keeps these joins in C: at 8,000 files a generator
        # expression per kind cost more than the changed file's parse.
        views = list(map(self._views.__getitem__, self._order))
        settings = _joined(map(attrgetter("settings"), views))
        self._state = ClusterState(
            services=_joined(map(attrgetter("services"), views)),
            endpoint_slices=_joined(map(attrgetter("slices"), views)),
            haproxy_pods=_joined(map(attrgetter("pods"), views)),
            replica_sets=_joined(map(attrgetter("replica_sets"), views)),
            settings=settings[0] if settings else None,
            **{name: _joined(map(attrgetter(name), views)) for name in ROUTE_FIELDS.values()},
        )
        self._errors = _joined(map(attrgetter("errors"), views))
        return True

    def state(self) -> ClusterState:
        """The state as of the last `refresh`."""
        return self._state

    def errors(self) -> list[str]:
        """Every file's errors as of the last `refresh`, by path, then document order."""
        return list(self._errors)


def _reusing(old: ParsedFile, new: ParsedFile) -> ParsedFile:
    """`new` with each object that equals the old one of its key replaced by that old one:
    an edit to one object of a file leaves the file's other objects identical."""
    previous = {key_of(obj): obj for _, _, obj in old.objects}
    objects: list[tuple[int, str, Converted]] = []
    for position, where, obj in new.objects:
        before = previous.get(key_of(obj))
        objects.append((position, where, before if before is not None and before == obj else obj))
    return ParsedFile(tuple(objects), new.errors)


def _joined(parts: Iterable[tuple[T, ...]]) -> tuple[T, ...]:
    return tuple(chain.from_iterable(parts))
