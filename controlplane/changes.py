"""What changed between two states of one source: the sources' own change keys.

A source knows what changed (the informer's ADDED/MODIFIED/DELETED events and the keys a
relist found different, the folder's re-read files); it records those keys, and each state
it hands out carries them as a `ChangeSet` relative to the state it handed out before. The
incremental `Computer` finds the changed Services and EndpointSlices from them instead of
an identity diff over every object, and falls back to that diff when it cannot use them
(no ChangeSet, another source, or a state in between it never saw).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping
from dataclasses import dataclass

ChangeKey = tuple[str, str, str]
"""(kind, namespace, name); cluster-scoped kinds have namespace ""."""

_ORIGINS = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """The objects of a state that differ from the state of version `since` of the same
    `origin`: each changed key with its object in this state (None: this state has none).
    Unchanged objects are the very same Python objects in both states."""

    origin: int  # one number per source (`ChangeLog`)
    since: int  # the version of the state these changes are relative to
    version: int  # the version of the state that carries them
    objects: Mapping[ChangeKey, object | None]

    def of(self, kind: str) -> dict[tuple[str, str], object | None]:
        """The changes of one kind, by (namespace, name)."""
        return {
            (namespace, name): found
            for (changed, namespace, name), found in self.objects.items()
            if changed == kind
        }


class ChangeLog:
    """One source's record of changed keys since the last state it handed out, and the
    version of each state it hands out. Thread-safe: keys are recorded by the source's
    threads, `stamp` is called by the one reading the state."""

    def __init__(self) -> None:
        self.origin = next(_ORIGINS)
        self._version = 0
        self._lock = threading.Lock()
        self._pending: dict[ChangeKey, object | None] = {}

    def record(self, changes: Mapping[ChangeKey, object | None]) -> None:
        """Keys changed (with their object now, None when gone); later records win."""
        with self._lock:
            self._pending.update(changes)

    def stamp(self, found: Mapping[ChangeKey, object | None] | None = None) -> ChangeSet:
        """The ChangeSet of the next state handed out: the recorded changes and `found`
        (which wins)."""
        with self._lock:
            objects, self._pending = self._pending, {}
            since = self._version
            self._version += 1
            version = self._version
        if found:
            objects.update(found)
        return ChangeSet(self.origin, since, version, objects)
