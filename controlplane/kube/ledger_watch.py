"""The slot ledger as every replica sees it: a watch on its shards (and on the single
ConfigMap of earlier versions), keeping the last good copy of each backend.

Followers compute with this view (`current()`); the leader starts from it when it takes the
Lease, so a new leader continues exactly what the followers served. A shard that is
deleted, corrupt or edited (its hash does not match) never takes a backend away: the last
good copy stays in the view, the problem is reported (`problems()`: ListWorkloads, metric,
Event) and the leader, told through `on_shard`, writes its own again at once. A deleted
backend's kept copy is dropped once no computation uses it (`retain`). Until the first
list the ledger is unread (`current()` is None): a follower is not ready then.

A backend's shard is read only from its canonical name (`shard_name`): a labelled object
under another name (a restored backup, a renamed copy, one naming another backend) is a
*stray*. Were it read, whichever object listed last would win and a stale copy would be
served after a restart; so it is never read for slots, never shown to the leader (no
drift, no rewrite, no delete) and only reported: `problems()`, a warning once per object
and `on_stray` (a Warning Event on it).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Collection

from kubernetes import client

from controlplane.kube.informer import Informer
from controlplane.kube.watch_stream import Key, WatchOptions
from controlplane.ledger.shards import (
    BULK_LABEL,
    LEDGER_LABEL,
    Bulk,
    Legacy,
    Shard,
    bulk_from,
    ledger_label,
    legacy_from,
    shard_from,
    shard_name,
)
from controlplane.model import ObjectRef
from controlplane.snapshot import BackendSlots, SlotAssignment

log = logging.getLogger(__name__)

ShardListener = Callable[[str, Shard | None], None]  # backend, the shard now (None: deleted)
StrayListener = Callable[[str, str, str], None]  # namespace, object name, what is wrong
KnownSlots = Callable[[str, str], BackendSlots | None]  # backend, digest -> slots written
KnownBulk = Callable[[str, str], SlotAssignment | None]  # name, digest -> backends written
BulkListener = Callable[[str, Bulk | None], None]  # object name, the bulk now (None: deleted)


class LedgerWatch:
    """The latest good ledger of `ref` (its shards, and the earlier single object)."""

    def __init__(
        self,
        api: client.ApiClient,
        ref: ObjectRef,
        options: WatchOptions | None = None,
        clock: Callable[[], float] = time.time,
        on_stray: StrayListener | None = None,
    ) -> None:
        """`on_stray(namespace, name, message)`: told once of each labelled object that is
        not a shard under its canonical name (an Event on it)."""
        self.ref = ref
        self._on_stray = on_stray
        core = client.CoreV1Api(api)
        lister = functools.partial(core.list_namespaced_config_map, ref.namespace)
        self._shards: Informer[Shard] = Informer(
            f"slot ledger {ref}",
            functools.partial(lister, label_selector=f"{LEDGER_LABEL}={ledger_label(ref.name)}"),
            lambda raw: shard_from(raw, clock(), self._known),
            options,
        )
        # Bulk objects (a first start's backends, until they are shards): a label of their
        # own, so the shard watch never takes them for strays.
        self._bulk_informer: Informer[Bulk] = Informer(
            f"slot ledger {ref} (bulk)",
            functools.partial(lister, label_selector=f"{BULK_LABEL}={ledger_label(ref.name)}"),
            lambda raw: bulk_from(raw, clock(), self._known_bulk),
            options,
        )
        self._legacy_informer: Informer[Legacy] = Informer(
            f"slot ledger {ref} (single object)",
            functools.partial(lister, field_selector=f"metadata.name={ref.name}"),
            lambda raw: legacy_from(raw, clock()),
            options,
        )
        self._lock = threading.Lock()
        self._good: dict[str, BackendSlots] = {}  # backend -> last good copy from its shard
        self._objects: dict[str, Shard] = {}  # backend -> its shard as now in the API
        self._problems: dict[str, str] = {}  # backend -> what is wrong with its shard
        self._deleted: set[str] = set()  # backends kept after their shard was deleted
        self._said: set[str] = set()  # deleted backends whose loss was logged
        self._strays: dict[str, str] = {}  # object name -> why it is not read
        self._legacy: Legacy | None = None  # the last readable single object
        self._legacy_now: Legacy | None = None  # as it is now (for its problems)
        self._bulks: dict[str, Bulk] = {}  # name -> last good bulk object
        self._bulk_problems: dict[str, str] = {}  # name -> what is wrong with it
        self._view: SlotAssignment | None = None  # built on demand, dropped on change
        self._listeners: list[ShardListener] = []
        self._bulk_listeners: list[BulkListener] = []
        self._known: KnownSlots = lambda backend, digest: None
        self._known_bulk: KnownBulk = lambda name, digest: None

    def recognise(self, known: KnownSlots) -> None:
        """`known(backend, digest)`: the slots this replica wrote under that hash (the
        leader's own writes), taken for a shard of that hash instead of parsing it."""
        self._known = known

    def recognise_bulk(self, known: KnownBulk) -> None:
        """`known(name, digest)`: the backends this replica wrote in that bulk object."""
        self._known_bulk = known

    # ------------------------------------------------------------------ lifecycle

    def start(self, on_change: Callable[[], None]) -> None:
        self._legacy_informer.start(on_change, self._on_legacy)
        self._bulk_informer.start(on_change, self._on_bulk)
        self._shards.start(on_change, self._on_shard)

    def stop(self) -> None:
        self._shards.signal_stop()
        self._bulk_informer.signal_stop()
        self._legacy_informer.signal_stop()
        self._shards.stop()
        self._bulk_informer.stop()
        self._legacy_informer.stop()

    def on_shard(self, listener: ShardListener) -> None:
        """Also call `listener` for every shard event (the leader's drift check)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ events

    def _on_legacy(self, key: Key, before: Legacy | None, after: Legacy | None) -> None:
        with self._lock:
            self._legacy_now = after
            # Deleted or unreadable before migration: its last readable content stays.
            if after is not None and (after.assignment or after.migrated or not after.problems):
                self._legacy = after
            self._view = None

    def on_bulk(self, listener: BulkListener) -> None:
        """Also call `listener` for every bulk object event (the leader's drift check)."""
        self._bulk_listeners.append(listener)

    def _on_bulk(self, key: Key, before: Bulk | None, after: Bulk | None) -> None:
        """A bulk object's backends are read where they have no shard. One edited or
        unreadable keeps its last good content; one deleted leaves its backends that have
        no shard as kept copies (as a deleted shard does) until no computation uses them:
        the leader deletes a bulk object only once every backend of it is a shard."""
        name = key[1]
        with self._lock:
            self._view = None
            said = self._bulk_problems.get(name, "")
            if after is None:
                self._bulk_problems.pop(name, None)
                gone = self._bulks.pop(name, None)
                for backend, slots in (gone.assignment if gone is not None else {}).items():
                    if backend not in self._objects and backend not in self._good:
                        self._good[backend] = slots
                        self._deleted.add(backend)
                        self._problems[backend] = (
                            f"bulk object {name} was deleted before its shard was written; "
                            "serving the last good copy until the leader writes it"
                        )
            elif after.problem:
                kept = "serving its last good content" if name in self._bulks else "not read"
                self._bulk_problems[name] = f"bulk object {name}: {after.problem}; {kept}"
            else:
                self._bulk_problems.pop(name, None)
                self._bulks[name] = after
            found = self._bulk_problems.get(name, "")
        if found and found != said:
            log.warning("slot ledger: %s", found)
        for listener in self._bulk_listeners:
            listener(name, after)

    def _on_shard(self, key: Key, before: Shard | None, after: Shard | None) -> None:
        # Only a backend's canonical object is its shard; any other labelled object is a
        # stray, reported and otherwise invisible (were it read, the last listed would win).
        old = before if before is not None and self._canonical(before) else None
        new = after if after is not None and self._canonical(after) else None
        stray = self._stray_problem(after) if after is not None and new is None else ""
        with self._lock:
            said_stray = self._strays.get(key[1], "")
            if stray:
                self._strays[key[1]] = stray
            else:
                self._strays.pop(key[1], None)
        if stray and stray != said_stray:
            log.warning("slot ledger: %s", stray)
            if self._on_stray is not None:
                self._on_stray(key[0], key[1], stray)
        if old is None and new is None:
            return
        backend = (new or old or _NO_SHARD).backend
        with self._lock:
            said = self._problems.get(backend)
            self._update(key, backend, old, new)
            found = self._problems.get(backend)
        # A deletion is said once a computation still uses the backend (`retain`): the
        # leader deletes the shards of Services that are gone, which is no problem.
        if found and found != said and backend not in self._deleted:
            log.warning("slot ledger: %s", found)
        for listener in self._listeners:
            listener(backend, new)

    def _canonical(self, shard: Shard) -> bool:
        """Whether `shard` is under the one name its backend's shard has."""
        return bool(shard.backend) and shard.name == shard_name(self.ref.name, shard.backend)

    def _stray_problem(self, shard: Shard) -> str:
        """What a labelled object that is not a canonical shard is, in one line."""
        where = f"configmap {self.ref.namespace}/{shard.name}"
        if not shard.backend:
            what = shard.problem or "it names no backend"
            return f"{where} carries the ledger label but is no shard ({what}); not read"
        return (
            f"{where} claims backend {shard.backend!r}, whose shard is "
            f"{shard_name(self.ref.name, shard.backend)}; not read (a copy under another name)"
        )

    def _update(self, key: Key, backend: str, before: Shard | None, after: Shard | None) -> None:
        """Keep the shard (or the loss of it) in the view; under the lock."""
        self._view = None
        if after is None:
            if self._objects.get(backend) is before:
                del self._objects[backend]
                if backend in self._good:
                    self._deleted.add(backend)
                    self._problems[backend] = (
                        f"shard {key[1]} was deleted; serving the last good copy "
                        "until the leader writes it again"
                    )
                else:
                    self._problems.pop(backend, None)
        else:
            self._objects[backend] = after
            self._deleted.discard(backend)
            self._take(backend, after)

    def _take(self, backend: str, shard: Shard) -> None:
        """Keep a good shard's content; for a bad one keep the last good copy (or, with
        none, an edited but readable one: the best there is) and say what is wrong."""
        good = self._good.get(backend)
        if shard.slots is not None and (shard.signed or good is None):
            self._good[backend] = shard.slots
        if not shard.problem:
            self._problems.pop(backend, None)
            return
        kept = "serving the last good copy" if good is not None else "no earlier copy"
        if shard.slots is not None and good is None:
            kept = "taken as found: there is no earlier copy"
        self._problems[backend] = f"shard {shard.name}: {shard.problem}; {kept}"

    # ------------------------------------------------------------------ reading

    @property
    def read(self) -> bool:
        """Whether the shards and the single object were listed at least once."""
        return (
            self._shards.wait_synced(0)
            and self._bulk_informer.wait_synced(0)
            and self._legacy_informer.wait_synced(0)
        )

    def wait_read(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self._shards.wait_synced(timeout):
            return False
        if not self._bulk_informer.wait_synced(max(0.0, deadline - time.monotonic())):
            return False
        return self._legacy_informer.wait_synced(max(0.0, deadline - time.monotonic()))

    def current(self) -> LedgerView | None:
        """The ledger as last read, None until first read. The assignment is a new
        mapping after every change and the same one otherwise (the computation reuses its
        work when handed the same mapping)."""
        if not self.read:
            return None
        with self._lock:
            if self._view is None:
                view: dict[str, BackendSlots] = {}
                legacy = self._legacy
                if legacy is not None and not legacy.migrated:
                    view.update(legacy.assignment)
                for name in sorted(self._bulks):  # never two holding one backend
                    view.update(self._bulks[name].assignment)
                view.update(self._good)
                self._view = view
            return LedgerView(self.version(), self._view)

    def version(self) -> str:
        return self._shards.resource_version or ""

    def shards(self) -> dict[str, Shard]:
        """Backend -> its shard as now in the API (the leader's starting point)."""
        with self._lock:
            return dict(self._objects)

    def bulks(self) -> dict[str, Bulk]:
        """Name -> each bulk object as last read good (the leader's starting point)."""
        with self._lock:
            return dict(self._bulks)

    def legacy(self) -> Legacy | None:
        with self._lock:
            return self._legacy

    def problems(self) -> list[str]:
        """What is wrong with the ledger now, one line per shard (and why it is unread)."""
        with self._lock:
            found = sorted(
                [*self._problems.values(), *self._strays.values(), *self._bulk_problems.values()]
            )
            legacy = self._legacy_now
        if legacy is not None and not legacy.migrated and legacy.problems:
            found += [f"configmap {self.ref}: {p}" for p in legacy.problems]
        return found

    def problem(self) -> str:
        """Why the ledger cannot be read now (the last list or watch error), or ""."""
        informers = (self._shards, self._bulk_informer, self._legacy_informer)
        return "; ".join(e for informer in informers for e in informer.errors())

    def retain(self, in_use: Collection[str]) -> None:
        """Forget the kept copies of deleted shards whose backend no computation uses
        any more (the leader removed a gone Service's shard)."""
        with self._lock:
            gone = [b for b in self._deleted if b not in in_use]
            missing = [self._problems[b] for b in self._deleted - self._said if b in in_use]
            self._said = {b for b in self._deleted if b in in_use}
            for backend in gone:
                self._deleted.discard(backend)
                self._good.pop(backend, None)
                self._problems.pop(backend, None)
            if gone:
                self._view = None
        for problem in missing:
            log.warning("slot ledger: %s", problem)


class LedgerView:
    """One reading of the ledger: its version and the assignment."""

    __slots__ = ("assignment", "version")

    def __init__(self, version: str, assignment: SlotAssignment) -> None:
        self.version = version
        self.assignment = assignment


_NO_SHARD = Shard("", "", "", None, "", False, "")
