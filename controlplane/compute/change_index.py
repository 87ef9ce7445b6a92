"""The change index: the Services and EndpointSlices of the last state, and which Services
changed since.

Fed with the source's own change keys (`controlplane.changes.ChangeSet`: the informer's
events, the folder's re-read files) a change costs its keys. Without them (no ChangeSet,
another source, a state in between this index never saw) it falls back to a full identity
diff: sources keep unchanged objects identical from one state to the next, so the objects
that changed are found with set operations over every object's id (C speed, but O(N)).
Both paths keep the same indexes and find the same Services.
"""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.changes import ChangeSet
from controlplane.model import ClusterState, EndpointSlice, Service

ServiceKey = tuple[str, str]


class ChangeIndex:
    """The last state's Services by key and EndpointSlices by Service, kept in step."""

    def __init__(self) -> None:
        self.by_key: dict[ServiceKey, Service] = {}
        self.slices_by_key: dict[ServiceKey, dict[int, EndpointSlice]] = {}
        self._services: dict[int, Service] = {}  # by id: the full diff's index
        self._slices: dict[int, EndpointSlice] = {}
        self._slice_by_name: dict[ServiceKey, EndpointSlice] = {}  # (namespace, name)
        self._seen: tuple[int, int] | None = None  # (origin, version) of the last state
        self.diffed = 0  # full diffs done (tests and benchmarks tell the paths apart)

    def update(self, state: ClusterState) -> set[ServiceKey]:
        """Index `state`; return the keys of Services whose object or slices changed."""
        changes, seen = state.changes, self._seen
        self._seen = None  # until this state is indexed
        if changes is not None and seen is not None and changes.origin == seen[0]:
            if changes.version == seen[1]:
                dirty: set[ServiceKey] | None = set()  # the state indexed last, again
            elif changes.since == seen[1]:
                dirty = self._apply(changes)
            else:
                dirty = None
            if dirty is not None and self._consistent(state):
                self._seen = (changes.origin, changes.version)
                return dirty
        dirty = self._diff(state)
        if changes is not None:
            self._seen = (changes.origin, changes.version)
        return dirty

    def _consistent(self, state: ClusterState) -> bool:
        """A cheap check that the indexes hold as many objects as `state` (a state made
        by `dataclasses.replace` from a stamped one carries a ChangeSet that is not its)."""
        return len(self._services) == len(state.services) and len(self._slices) == len(
            state.endpoint_slices
        )

    def _apply(self, changes: ChangeSet) -> set[ServiceKey]:
        """The changed keys only: O(changes)."""
        dirty: set[ServiceKey] = set()
        for key, found in changes.of("Service").items():
            assert found is None or isinstance(found, Service)
            before = self.by_key.get(key)
            if before is found:
                continue
            if before is not None:
                self._services.pop(id(before), None)
                del self.by_key[key]
            if found is not None:
                self._services[id(found)] = found
                self.by_key[key] = found
            dirty.add(key)
        for name, found in changes.of("EndpointSlice").items():
            assert found is None or isinstance(found, EndpointSlice)
            gone = self._slice_by_name.get(name)
            if gone is found:
                continue
            if gone is not None:
                dirty.add(self._drop_slice(id(gone)))
            if found is not None:
                dirty.add(self._add_slice(found))
        return dirty

    def _diff(self, state: ClusterState) -> set[ServiceKey]:
        """Every object compared by identity: O(N)."""
        self.diffed += 1
        # dict(zip(map(id, ...))) runs in C: 16,000 objects cost ~1 ms less than a
        # comprehension, per change.
        services = dict(zip(map(id, state.services), state.services, strict=True))
        slices = dict(zip(map(id, state.endpoint_slices), state.endpoint_slices, strict=True))
        dirty: set[ServiceKey] = set()
        for gone in self._services.keys() - services.keys():
            service = self._services[gone]
            key = (service.namespace, service.name)
            if self.by_key.get(key) is service:
                del self.by_key[key]
            dirty.add(key)
        for new in services.keys() - self._services.keys():
            service = services[new]
            key = (service.namespace, service.name)
            self.by_key[key] = service
            dirty.add(key)
        self._services = services
        for gone in self._slices.keys() - slices.keys():
            dirty.add(self._drop_slice(gone))
        for new in slices.keys() - self._slices.keys():
            dirty.add(self._add_slice(slices[new]))
        return dirty

    def _drop_slice(self, ident: int) -> ServiceKey:
        endpoint_slice = self._slices.pop(ident)
        key = (endpoint_slice.namespace, endpoint_slice.service_name)
        self.slices_by_key[key].pop(ident, None)
        name = (endpoint_slice.namespace, endpoint_slice.name)
        if self._slice_by_name.get(name) is endpoint_slice:
            del self._slice_by_name[name]
        return key

    def _add_slice(self, endpoint_slice: EndpointSlice) -> ServiceKey:
        ident = id(endpoint_slice)
        self._slices[ident] = endpoint_slice
        key = (endpoint_slice.namespace, endpoint_slice.service_name)
        self.slices_by_key.setdefault(key, {})[ident] = endpoint_slice
        self._slice_by_name[endpoint_slice.namespace, endpoint_slice.name] = endpoint_slice
        return key


def slices_of(index: Mapping[int, EndpointSlice]) -> tuple[EndpointSlice, ...]:
    """A Service's slices sorted by name: input order never matters."""
    return tuple(sorted(index.values(), key=_slice_name))


def _slice_name(endpoint_slice: EndpointSlice) -> str:
    return endpoint_slice.name
