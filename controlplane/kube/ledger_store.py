"""The Kubernetes slot ledger's writes: one ConfigMap shard per backend
(`controlplane.ledger.shards`), written only when its backend changed.

The leader starts from the ledger as its `LedgerWatch` keeps it (the followers' view), and
each save writes the shards of the backends the step changed, each with its own
resourceVersion precondition: a conflict on one re-reads and rewrites that one (the
leader's assignment is what is being published), never the others. Shards of backends no
longer in the assignment are deleted. The watch tells the leader of every shard event;
one whose content is not what the leader wrote (deleted, edited, corrupt, written by a
former leader) marks that backend dirty and wakes the loop, which writes it again at once.
A labelled object under any other name (a restored backup) is not a shard: the watch
reports it and never shows it here, so the leader neither continues, rewrites nor deletes
it.

A save creating `BULK_MIN` shards or more (a first start) writes those backends into bulk
objects first, so the loop can publish after a few writes, and later saves turn them into
shards (`CONVERT_BATCH` each) and delete the bulk objects (docs/design.md, "The slot
ledger"), from `CONVERT_DELAY_PER_BACKEND_S` per backend after the bulk write: the agents
load that first publication meanwhile, and the conversion's creates would take the CPU
they load it with.

A refused write raises `LedgerWriteError` (ledger_errors.py), permanent for what retrying
cannot fix (422 invalid, 413 too large, 403 forbidden, 400), naming the backends left
unwritten: the reconcile loop says so once per cause, publishes what was written (those
backends keep what they had), and retries with backoff.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.kube.ledger_errors import write_error
from controlplane.kube.ledger_watch import LedgerWatch
from controlplane.ledger.shards import (
    BULK_LABEL,
    BULK_MIN,
    LEDGER_LABEL,
    MANAGED_BY,
    MAX_OBJECT_BYTES,
    MIGRATED_ANNOTATION,
    Bulk,
    Shard,
    bulk_data,
    bulk_name,
    ledger_label,
    pack_bulks,
    shard_bytes,
    shard_data,
    shard_name,
)
from controlplane.ledger.store import LedgerWriteError, Since, changes, names_to_compare
from controlplane.model import ObjectRef
from controlplane.snapshot import BackendSlots, SlotAssignment

log = logging.getLogger(__name__)

PARALLEL_MIN = 16  # a save writing at least this many shards writes them concurrently
# Shard writes in flight at once. A first start writes one shard per backend: 8,000
# creates took ~70 s at 8 against a loaded real API server; 32 writes 20-30% faster
# there (1,000 creates: 8.9 -> 6.1 s, 11.4 -> 9.5 s) and the same against the fake.
PARALLEL_WRITES = 32
OWN_ECHOES = 8  # recent resourceVersions per shard recognised as our own writes
# Backends held in bulk turned into shards per save: the loop runs between batches, so an
# endpoint change waits for one batch (a few seconds at most), not for all 8,000 creates.
CONVERT_BATCH = 500
# The conversion waits this long per backend written in bulk (at most CONVERT_DELAY_MAX_S):
# the publication that follows the bulk write is the agents' first load of that many
# backends (8,000: render and HAProxy 2.6's start, 4-5 s of CPU each, 10-30 s on a loaded
# 2-core node), and 8,000 creates cost about a minute of CPU against a real API server
# (docs/findings.md, "First start at 8,000 Services: the conversion after the first load").
CONVERT_DELAY_PER_BACKEND_S = 0.0075
CONVERT_DELAY_MAX_S = 60.0


class LedgerReadError(Exception):
    """The ledger could not be listed: computing now would rebuild every slot."""


@dataclass(frozen=True, slots=True)
class _Object:
    """A shard object as last known: its name and resourceVersion."""

    name: str
    version: str


class ConfigMapLedger:
    """`SlotLedger` in ConfigMap shards of `ref.name` in `ref.namespace`."""

    def __init__(
        self,
        api: client.ApiClient,
        ref: ObjectRef,
        watch: LedgerWatch,
        *,
        writer: str = "",
        request_timeout: float = 10.0,
        read_timeout: float = 30.0,
        parallel: int = PARALLEL_WRITES,
        refused: Callable[[str, str, str], None] | None = None,
        bulk_min: int = BULK_MIN,
        convert_delay_per_backend: float = CONVERT_DELAY_PER_BACKEND_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`refused(namespace, object name, message)`: told of a write the API refused for good (an
        Event on that object, rate-limited by the recorder); `convert_delay_per_backend`:
        how long bulk objects wait before they are made shards, per backend they hold
        (`clock` tells when that is)."""
        self.ref = ref
        self._refused = refused
        self._core = client.CoreV1Api(api)
        self._watch = watch
        self._writer = writer
        self._timeout = (request_timeout, request_timeout)
        self._read_timeout = read_timeout
        self._parallel = parallel
        self._lock = threading.Lock()
        self._saved: dict[str, BackendSlots] = {}  # what the API holds, as we wrote it
        self._digests: dict[str, str] = {}  # backend -> hash of what we hold for it
        self._present: dict[str, _Object] = {}  # backend -> its shard object in the API
        # backend -> resourceVersions of our recent writes. A watch event may arrive after a
        # later write (or our delete) of the same shard: it is an echo, not drift. Kept past a
        # delete until the watch reports that delete, so a late echo is never "someone else".
        self._own: dict[str, list[str]] = {}
        self._dirty: set[str] = set()
        # Shards the API holds that no save of ours put there (found at load, or seen in an
        # event since): a save after a whole one looks for stale shards among these and the
        # backends it was told of only, not among every shard (8,000 keys a change)
        self._foreign: set[str] = set()
        self._last: SlotAssignment | None = None  # the assignment `_saved` holds as is
        self._legacy_pending = False
        self._on_drift: Callable[[], None] = lambda: None
        self._leading: Callable[[], bool] = lambda: True
        self._label = ledger_label(ref.name)
        self.bytes_written = 0  # request bodies sent (the benchmark reads it)
        self.largest_shard = 0  # bytes of the largest shard written
        # backend -> (hash, slots) of its latest write: the watch takes an echo's slots
        # from here instead of parsing them (`LedgerWatch.recognise`)
        self._written: dict[str, tuple[str, BackendSlots]] = {}
        # Bulk objects (docs/design.md, "The slot ledger"): a save creating `bulk_min`
        # shards or more writes those backends into a few bulk objects instead, and later
        # saves turn them into shards (`CONVERT_BATCH` each), then delete the bulk objects.
        self._bulk_min = bulk_min
        self._bulk_objects: dict[str, tuple[str, frozenset[str]]] = {}  # name -> version, backends
        self._bulk_of: dict[str, str] = {}  # backend -> the bulk object holding it
        self._unconverted: dict[str, BackendSlots] = {}  # held in bulk only, as held there
        self._written_bulks: dict[str, tuple[str, SlotAssignment]] = {}  # name -> hash, content
        self._convert_delay = convert_delay_per_backend
        self._clock = clock
        self._convert_from = 0.0  # `clock` time from which bulk backends are made shards
        watch.on_shard(self._observed)
        watch.recognise(self._written_slots)
        watch.on_bulk(self._observed_bulk)
        watch.recognise_bulk(self._written_bulk)

    def on_drift(self, callback: Callable[[], None]) -> None:
        """Call `callback` (the loop's on_change) when a shard needs writing again."""
        self._on_drift = callback

    def write_only_while(self, leading: Callable[[], bool]) -> None:
        """Send a write or a delete only while `leading()`, asked before each request: a
        replica that stopped leading during a save (paused past its Lease, a slow step)
        must not overwrite the new leader's shards, not even after a 409 said that
        someone else wrote them."""
        self._leading = leading

    def _fence(self, name: str) -> None:
        if not self._leading():
            raise LedgerWriteError(
                f"shard {name} not written: this replica no longer leads",
                cause="not-leading",
                permanent=False,
            )

    # ------------------------------------------------------------------ load

    def load(self) -> tuple[SlotAssignment, list[str]]:
        if not self._watch.wait_read(self._read_timeout):
            why = self._watch.problem() or "no answer yet"
            raise LedgerReadError(f"slot ledger {self.ref} not read: {why}")
        view = self._watch.current()
        assert view is not None  # read
        shards = self._watch.shards()
        bulks = self._watch.bulks()
        legacy = self._watch.legacy()
        with self._lock:
            self._saved = {
                backend: shard.slots
                for backend, shard in shards.items()
                if shard.slots is not None
                and shard.signed
                and view.assignment.get(backend) is shard.slots
            }
            self._digests = {b: shards[b].digest for b in self._saved}
            # Backends the view takes from a bulk object: held, still to be made shards
            self._bulk_objects = {
                b.name: (b.version, frozenset(b.assignment)) for b in bulks.values()
            }
            self._bulk_of = {}
            self._unconverted = {}
            for bulk in bulks.values():
                for backend, slots in bulk.assignment.items():
                    if backend not in self._saved and view.assignment.get(backend) is slots:
                        self._bulk_of[backend] = bulk.name
                        self._unconverted[backend] = slots
                        self._saved[backend] = slots
            self._present = {b: _Object(s.name, s.version) for b, s in shards.items()}
            self._own = {}
            self._dirty = set()
            self._legacy_pending = legacy is not None and not legacy.migrated
            loaded = dict(view.assignment)
            self._foreign = set(self._present.keys() - loaded.keys())
            # `_saved` holds the signed shards only: a save after this load compares all
            self._last = loaded if len(self._saved) == len(loaded) else None
        return loaded, self._watch.problems()

    # ------------------------------------------------------------------ save

    def dirty(self) -> bool:
        with self._lock:
            return bool(self._dirty or self._converting() or self._bulk_pending())

    def _converting(self) -> bool:
        """Backends held in bulk only, to be made shards now (not while the agents load the
        publication that followed their bulk write)."""
        return bool(self._unconverted) and self._clock() >= self._convert_from

    def _bulk_pending(self) -> bool:
        """A bulk object all of whose backends are shards now: to be deleted."""
        return any(
            not any(self._bulk_of.get(b) == name for b in backends)
            for name, (_, backends) in self._bulk_objects.items()
        )

    def save(self, assignment: SlotAssignment, since: Since | None = None) -> None:
        with self._lock:
            # A drifted shard leaves `_saved` with its name in `_dirty`, which is compared
            names = names_to_compare(since, self._last)
            self._last = None  # until this save is whole
            todo = changes(self._saved, assignment, self._dirty, names)
            if names is None:
                stale = sorted(self._present.keys() - assignment.keys())
            else:  # since a whole save every other shard present is one `assignment` holds
                candidates = {*names, *self._dirty, *self._foreign}
                stale = sorted(b for b in candidates if b in self._present and b not in assignment)
            self._foreign.clear()
            self._dirty.clear()
            for backend in [b for b in self._unconverted if b not in assignment]:
                del self._unconverted[backend]  # gone before it became a shard
                self._saved.pop(backend, None)
                self._bulk_of.pop(backend, None)
            fresh = {
                b: slots
                for b, slots in todo.written.items()
                if b not in self._present and b not in self._bulk_of
            }
            if len(fresh) < self._bulk_min:
                fresh = {}
            # held in bulk, unchanged: made shards a batch per save
            converting = [
                (b, slots)
                for b, slots in (self._unconverted.items() if self._converting() else ())
                if b not in todo.written and ((now := assignment.get(b)) is slots or now == slots)
            ][:CONVERT_BATCH]
        errors: list[LedgerWriteError] = []
        bulk_unwritten: set[str] = set()
        if fresh:
            bulk_unwritten, bulk_errors = self._write_bulks(fresh)
            errors.extend(bulk_errors)
        items = [(b, slots) for b, slots in todo.written.items() if b not in fresh]
        items += converting
        if len(items) >= PARALLEL_MIN and self._parallel > 1:
            with ThreadPoolExecutor(self._parallel, thread_name_prefix="ledger-write") as pool:
                outcomes = list(pool.map(lambda item: self._try_write(*item), items))
        else:
            outcomes = [self._try_write(backend, slots) for backend, slots in items]
        errors.extend(e for e in outcomes if e is not None)
        if self._refused is not None:
            for (backend, _), error in zip(items, outcomes, strict=True):
                if error is not None and error.permanent:
                    name = shard_name(self.ref.name, backend)
                    self._refused(self.ref.namespace, name, str(error))
        for backend in stale:
            error = self._delete(backend)
            if error is not None:
                errors.append(error)
        if not errors:
            errors.extend(self._delete_converted_bulks())
        if errors:
            with self._lock:  # what failed is written again by the next save
                self._dirty.update(b for b, _ in items if b not in self._saved)
                self._dirty.update(bulk_unwritten)
            # Every other shard was written: the loop may publish them (a failed delete
            # leaves a stale shard, which publishes nothing).
            unwritten = frozenset(
                b for (b, _), e in zip(items, outcomes, strict=True) if e is not None
            ) | frozenset(bulk_unwritten)
            raise min(errors, key=lambda e: not e.permanent).of(unwritten)
        if self._legacy_pending and not self._unconverted:
            self._mark_legacy()
        self._last = assignment
        if self.dirty():  # bulk backends still to be made shards: another save soon
            self._on_drift()

    # ------------------------------------------------------------------ bulk

    def _write_bulks(
        self, fresh: dict[str, BackendSlots]
    ) -> tuple[set[str], list[LedgerWriteError]]:
        """Write `fresh` into bulk objects; the backends left unwritten and the errors."""
        groups = pack_bulks(fresh)

        def write(group: tuple[list[str], str]) -> LedgerWriteError | None:
            try:
                self._write_bulk(group[0], group[1], fresh)
                return None
            except Exception as error:  # reported by the loop, as a shard's
                return write_error(
                    error, f"cannot write slot ledger bulk object of {len(group[0])} backends"
                )

        with ThreadPoolExecutor(
            max(1, min(self._parallel, 8)), thread_name_prefix="ledger-bulk"
        ) as pool:
            outcomes = list(pool.map(write, groups))
        unwritten = {
            b
            for (names, _), e in zip(groups, outcomes, strict=True)
            if e is not None
            for b in names
        }
        written = len(fresh) - len(unwritten)
        delay = min(CONVERT_DELAY_MAX_S, written * self._convert_delay)
        with self._lock:
            self._convert_from = self._clock() + delay
        if delay > 0:  # the loop is woken then (a save before converts nothing)
            timer = threading.Timer(delay, lambda: self._on_drift())
            timer.daemon = True
            timer.start()
        log.info(
            "slot ledger %s: %d new backends written in %d bulk objects; making them shards "
            "in %.1fs, %d per save",
            self.ref,
            written,
            len(groups),
            delay,
            CONVERT_BATCH,
        )
        return unwritten, [e for e in outcomes if e is not None]

    def _write_bulk(self, backends: list[str], text: str, fresh: dict[str, BackendSlots]) -> None:
        data, digest = bulk_data(text, self._writer)
        size = shard_bytes(data)
        if size > MAX_OBJECT_BYTES:  # cannot happen (shards.BULK_BYTES); said if it did
            raise LedgerWriteError(
                f"bulk object would be {size} bytes (limit {MAX_OBJECT_BYTES})",
                cause="too-large",
                permanent=True,
            )
        name = bulk_name(self.ref.name, backends)
        part = {b: fresh[b] for b in backends}
        with self._lock:
            self._written_bulks[name] = (digest, part)
        new_version = self._write_object(name, data, "", bulk=True, what="bulk object")
        with self._lock:
            self._bulk_objects[name] = (new_version, frozenset(backends))
            for backend in backends:
                self._bulk_of[backend] = name
                self._unconverted[backend] = part[backend]
                self._saved[backend] = part[backend]
            self.largest_shard = max(self.largest_shard, size)

    def _write_object(
        self, name: str, data: dict[str, str], version: str, bulk: bool, what: str
    ) -> str:
        """Write object `name` (fenced: only while this replica may), from `version`
        ("": create it): a 409 (changed under us, or created meanwhile) reads its version
        again, a 404 of an update (deleted under us) creates it, four tries at most. The
        resourceVersion written."""
        for _ in range(4):
            self._fence(name)
            body = self._body(name, data, version, bulk=bulk)
            try:
                written = self._send(name, body, version)
            except ApiException as error:
                if error.status == 409:
                    version = self._version_of(name)
                    continue
                if error.status == 404 and version:
                    version = ""
                    continue
                raise
            return str((written.get("metadata") or {}).get("resourceVersion") or "")
        raise LedgerWriteError(
            f"{what} {name} kept changing under us", cause="conflict", permanent=False
        )

    def _written_bulk(self, name: str, digest: str) -> SlotAssignment | None:
        with self._lock:
            found = self._written_bulks.get(name)
        return found[1] if found is not None and found[0] == digest else None

    def _delete_converted_bulks(self) -> list[LedgerWriteError]:
        """Delete the bulk objects none of whose backends is held there only any more."""
        with self._lock:
            done = [
                (name, version)
                for name, (version, backends) in self._bulk_objects.items()
                if not any(self._bulk_of.get(b) == name for b in backends)
            ]
            for name, _ in done:
                del self._bulk_objects[name]
                self._written_bulks.pop(name, None)
        errors: list[LedgerWriteError] = []
        for name, version in done:
            try:
                self._fence(name)
                self._core.delete_namespaced_config_map(
                    name, self.ref.namespace, _preload_content=False, _request_timeout=self._timeout
                )
            except ApiException as error:
                if error.status != 404:
                    with self._lock:
                        self._bulk_objects[name] = (version, frozenset())
                    errors.append(
                        write_error(error, f"cannot delete slot ledger bulk object {name}")
                    )
            except Exception as error:
                with self._lock:
                    self._bulk_objects[name] = (version, frozenset())
                errors.append(write_error(error, f"cannot delete slot ledger bulk object {name}"))
        if done and not errors:
            log.info(
                "slot ledger %s: every backend of %d bulk objects is a shard; deleted them",
                self.ref,
                len(done),
            )
        return errors

    def _observed_bulk(self, name: str, bulk: Bulk | None) -> None:
        """A bulk object event: one of ours changed or deleted by someone else makes its
        backends still held there shards at once."""
        with self._lock:
            known = self._bulk_objects.get(name)
            if known is None or (bulk is not None and bulk.version == known[0]):
                return  # not ours to keep, or the echo of our write
            moved = [b for b in known[1] if self._bulk_of.get(b) == name]
            for backend in moved:
                self._unconverted.pop(backend, None)
                self._saved.pop(backend, None)
                self._dirty.add(backend)
        if moved:
            log.warning(
                "slot ledger bulk object %s %s; writing its %d backends as shards",
                name,
                "deleted" if bulk is None else "rewritten by someone else",
                len(moved),
            )
            self._on_drift()

    def _try_write(self, backend: str, slots: BackendSlots) -> LedgerWriteError | None:
        try:
            self._write(backend, slots)
            return None
        except Exception as error:  # every failure is reported by the loop
            return write_error(error, f"cannot write slot ledger shard for {backend}")

    def _write(self, backend: str, slots: BackendSlots) -> None:
        data, digest = shard_data(backend, slots, self._writer)
        size = shard_bytes(data)
        if size > MAX_OBJECT_BYTES:  # cannot happen (shards.max_shard_bytes); said if it did
            raise LedgerWriteError(
                f"shard for {backend} would be {size} bytes (limit {MAX_OBJECT_BYTES})",
                cause="too-large",
                permanent=True,
            )
        name = shard_name(self.ref.name, backend)
        with self._lock:
            self._digests[backend] = digest  # an echo of this write is ours
            self._written[backend] = (digest, slots)
            known = self._present.get(backend)
        version = known.version if known is not None else ""
        new_version = self._write_object(name, data, version, bulk=False, what="shard")
        with self._lock:
            self._present[backend] = _Object(name, new_version)
            echoes = self._own.setdefault(backend, [])
            echoes.append(new_version)
            del echoes[:-OWN_ECHOES]
            if self._digests.get(backend) == digest:
                self._saved[backend] = slots
                self._unconverted.pop(backend, None)  # a shard now: bulk copy unread
                self._bulk_of.pop(backend, None)
            self.largest_shard = max(self.largest_shard, size)

    def _written_slots(self, backend: str, digest: str) -> BackendSlots | None:
        """The slots of this replica's latest write of `backend`, if it had hash `digest`."""
        with self._lock:
            found = self._written.get(backend)
        return found[1] if found is not None and found[0] == digest else None

    def _body(
        self, name: str, data: dict[str, str], version: str, bulk: bool = False
    ) -> dict[str, Any]:
        label = BULK_LABEL if bulk else LEDGER_LABEL
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": self.ref.namespace,
            "labels": {**MANAGED_BY, label: self._label},
        }
        if version:
            metadata["resourceVersion"] = version
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}

    def _send(self, name: str, body: dict[str, Any], version: str) -> dict[str, Any]:
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        self.bytes_written += len(json.dumps(body))
        if version:
            response = self._core.replace_namespaced_config_map(
                name, self.ref.namespace, body, **options
            )
        else:
            response = self._core.create_namespaced_config_map(self.ref.namespace, body, **options)
        written: dict[str, Any] = json.loads(response.data)
        return written

    def _version_of(self, name: str) -> str:
        """The object's resourceVersion now, "" when it does not exist."""
        try:
            response = self._core.read_namespaced_config_map(
                name, self.ref.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as error:
            if error.status == 404:
                return ""
            raise
        found: dict[str, Any] = json.loads(response.data)
        return str((found.get("metadata") or {}).get("resourceVersion") or "")

    def _delete(self, backend: str) -> LedgerWriteError | None:
        with self._lock:
            known = self._present.pop(backend, None)
            self._saved.pop(backend, None)
            self._digests.pop(backend, None)
            self._written.pop(backend, None)
        if known is None:
            return None
        try:
            self._fence(known.name)
            self._core.delete_namespaced_config_map(
                known.name,
                self.ref.namespace,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        except ApiException as error:
            if error.status != 404:
                with self._lock:
                    self._present.setdefault(backend, known)
                return write_error(error, f"cannot delete slot ledger shard {known.name}")
        except Exception as error:
            with self._lock:
                self._present.setdefault(backend, known)
            return write_error(error, f"cannot delete slot ledger shard {known.name}")
        return None

    def _mark_legacy(self) -> None:
        """Every shard is written: the single object's content is not read any more."""
        patch = {"metadata": {"annotations": {MIGRATED_ANNOTATION: "shards"}}}
        try:
            self._core.patch_namespaced_config_map(
                self.ref.name,
                self.ref.namespace,
                patch,
                _preload_content=False,
                _request_timeout=self._timeout,
            )
        except ApiException as error:
            if error.status != 404:
                raise write_error(error, f"cannot mark configmap {self.ref} migrated") from error
        self._legacy_pending = False
        log.info("slot ledger %s migrated to one shard per backend", self.ref)

    # ------------------------------------------------------------------ drift

    def _observed(self, backend: str, shard: Shard | None) -> None:
        """A shard event: is the API still holding what we wrote?"""
        with self._lock:
            if shard is not None and shard.version in self._own.get(backend, ()):
                return  # the echo of our own write
            if shard is None:
                if backend not in self._present:
                    self._own.pop(backend, None)  # deleted: no echo of it can follow
                known = self._present.pop(backend, None)
                drift = backend in self._saved and known is not None
                if drift:
                    self._saved.pop(backend, None)
            else:
                self._present[backend] = _Object(shard.name, shard.version)
                self._foreign.add(backend)
                expected = self._digests.get(backend)
                drift = expected is not None and not (shard.signed and shard.digest == expected)
                if drift:
                    self._saved.pop(backend, None)
                elif expected is None:
                    drift = bool(self._saved)  # a shard we do not hold: delete it
            if drift:
                self._dirty.add(backend)
        if drift:
            what = "deleted" if shard is None else shard.problem or "rewritten by someone else"
            log.warning(
                "slot ledger shard for %s %s; writing the leader's copy again", backend, what
            )
            self._on_drift()
