"""An API group the cluster may not serve (its CRDs not installed), said once.

The informers of its collections take a 404 for "no objects" (`informer.Informer`).
"""

from __future__ import annotations

import logging
import threading

# The informers' logger, as before this module was split out of `informer.py`.
log = logging.getLogger("controlplane.kube.informer")


class OptionalGroup:
    """An API group the cluster may not serve (CRDs not installed). Its informers take a
    404 for "no objects"; the group logs once when the first goes missing and once when
    the last comes back, not once per collection and retry.

    `what` names it in those lines (default "API group <group>") and `level` is the level
    of the first: kinds many clusters lack by choice (the Gateway API's experimental
    channel) say so at INFO, not as a warning."""

    def __init__(
        self, group: str, consequence: str, *, what: str = "", level: int = logging.WARNING
    ) -> None:
        self.group = group
        self._consequence = consequence
        self._what = what or f"API group {group}"
        self._level = level
        self._lock = threading.Lock()
        self._absent: set[str] = set()

    def absent(self, collection: str) -> None:
        with self._lock:
            first = not self._absent
            self._absent.add(collection)
        if first:
            log.log(self._level, "%s is not served (404): %s", self._what, self._consequence)

    def present(self, collection: str) -> None:
        with self._lock:
            was = collection in self._absent
            self._absent.discard(collection)
            last = was and not self._absent
        if last:
            log.info("%s is served now", self._what)

    @property
    def missing(self) -> bool:
        with self._lock:
            return bool(self._absent)
