"""List-then-watch of one Kubernetes collection with the official client, kept in a cache.

One thread per informer. A full list (paged with limit/continue) fills the cache and gives
the resourceVersion to watch from; the watch asks for bookmarks, carries a server-side
timeout and a client socket timeout (a half-open connection cannot hang it), and tracks the
resourceVersion of every event, BOOKMARK included. 410 Gone (an ERROR event or an HTTP 410)
triggers a relist whose diff against the cache yields the deletions missed in the gap; any
other failure reconnects from the last resourceVersion after an exponential backoff with
jitter. Objects are cached converted to model types, so a change the model does not see
(a status field, a relist that finds the same objects) never calls `on_change`, and an
unchanged object stays the very object. With `record_changes` the keys of the objects that
changed (each event's, and what a relist or a 404 found different, deletions included) are
kept until `take`: the Kubernetes source hands them with its state (`changes.ChangeSet`).

A collection of an `OptionalGroup` (the Gateway API, whose CRDs a cluster may lack) that
answers 404 is an empty, synced cache: the group says so once, the informer asks again
every `absent_recheck` seconds and fills the cache when the CRDs appear.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubernetes.client.exceptions import ApiException
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from controlplane.kube.optional_group import OptionalGroup
from controlplane.kube.watch_stream import (
    Gone,
    Key,
    WatchError,
    WatchOptions,
    close,
    key_of,
    lines,
    resource_version,
)
from controlplane.source.convert import Manifest, ManifestError

log = logging.getLogger(__name__)

T = TypeVar("T")
Lister = Callable[..., Any]  # an official client list_* method, other arguments bound
ItemListener = Callable[[Key, T | None, T | None], None]  # key, before, after


class _Stopped(Exception):
    """Raised out of a backoff sleep when the informer is stopped."""


@dataclass(frozen=True, slots=True)
class _Rejected:
    """An object that could not be converted, and why."""

    reason: str


class Informer(Generic[T]):
    """Cache of one collection, converted by `convert`, kept current by list/watch."""

    def __init__(
        self,
        name: str,
        lister: Lister,
        convert: Callable[[Manifest], T],
        options: WatchOptions | None = None,
        optional: OptionalGroup | None = None,
        *,
        record_changes: bool = False,
    ) -> None:
        """With `optional`, a 404 on the collection means its API group is not installed;
        with `record_changes`, the keys of changed objects are kept for `take`."""
        self.name = name
        self._record = record_changes
        self._changed: set[Key] = set()  # keys changed since the last `take`
        self._optional = optional
        self._lister = lister
        self._convert = convert
        self._options = options or WatchOptions()
        self._lock = threading.Lock()
        self._items: dict[Key, T] = {}
        # `_items`' values as `take` hands them, in the cache's order (the computation's
        # result does not depend on input order: no sort), built again only after the
        # cache changed: copying 8,000 objects per computation was O(cluster) per change.
        self._values: tuple[T, ...] | None = None
        self._bad: dict[Key, str] = {}
        self._failure = ""
        self._rv: str | None = None
        self._gone_in_row = 0
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._response: Any = None
        self._thread: threading.Thread | None = None
        self._on_change: Callable[[], None] = lambda: None
        self._on_item: ItemListener[T] | None = None
        self.relists = 0
        self.watches = 0
        self.bookmarks = 0  # BOOKMARK events received: the watch cache's progress reports

    # ------------------------------------------------------------------ interface

    def start(self, on_change: Callable[[], None], on_item: ItemListener[T] | None = None) -> None:
        """Watch in a thread; `on_change` after every change of the cache, and first
        `on_item(key, before, after)` for each object that changed (None: absent), for
        caches that keep per-object state (the slot ledger's last good copies)."""
        self._on_change = on_change
        self._on_item = on_item
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def items(self) -> dict[Key, T]:
        with self._lock:
            return dict(self._items)

    def take(self) -> tuple[tuple[T, ...], dict[Key, T | None]]:
        """The cached objects (the very tuple of the last `take` while the cache did not
        change) and each key whose object changed (came, went or was replaced) since the
        last `take`, with its object now (None: gone), at one instant (with
        `record_changes`: watch events, and what a relist or a 404 found different,
        deletions included)."""
        with self._lock:
            changed, self._changed = self._changed, set()
            if self._values is None:
                self._values = tuple(self._items.values())
            return self._values, {key: self._items.get(key) for key in changed}

    @property
    def resource_version(self) -> str | None:
        with self._lock:
            return self._rv

    def errors(self) -> list[str]:
        with self._lock:
            found = [f"{self.name} {ns}/{name}: {why}" for (ns, name), why in self._bad.items()]
            if self._failure:
                found.append(f"{self.name}: {self._failure}")
            return sorted(found)

    def signal_stop(self) -> None:
        """Ask the thread to end and abort a blocked read; does not wait."""
        self._stopping.set()
        response = self._response
        if response is not None:
            close(response)

    def stop(self, timeout: float = 5.0) -> None:
        self.signal_stop()
        if self._thread is not None:
            self._thread.join(timeout)

    # ------------------------------------------------------------------ loop

    def _run(self) -> None:
        options = self._options
        retrying = Retrying(
            wait=wait_exponential(multiplier=options.backoff_initial, max=options.backoff_max)
            + wait_random(0, options.backoff_jitter),
            retry=retry_if_exception(lambda e: not isinstance(e, _Stopped)),
            sleep=self._sleep,
            before_sleep=self._failed,
            reraise=True,
        )
        while not self._stopping.is_set():
            try:
                retrying(self._cycle)
            except _Stopped:
                return
            except Exception:  # pragma: no cover - tenacity retries all but _Stopped
                log.exception("informer %s: unexpected exit", self.name)
                return

    def _sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise _Stopped

    def _failed(self, state: RetryCallState) -> None:
        if self._stopping.is_set():
            return
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, ApiException):
            text = f"HTTP {error.status} {error.reason}"
        else:
            text = f"{type(error).__name__}: {error}"
        with self._lock:
            self._failure = text
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("informer %s: %s; retrying in %.2fs", self.name, self._failure, wait)

    def _cycle(self) -> None:
        """Relist when needed, then watch until the stream ends; raises on failure."""
        if self._stopping.is_set():
            raise _Stopped
        try:
            if self._rv is None:
                self._relist()
            try:
                self._watch()
            except Gone as gone:
                self._rv = None
                self._gone_in_row += 1
                log.info(
                    "informer %s: resourceVersion expired (410: %s), relisting", self.name, gone
                )
                if self._gone_in_row > 1:
                    raise  # 410 again right after a relist: back off before the next one
        except ApiException as error:
            if self._optional is None or error.status != 404:
                raise
            self._absent()
            self._sleep(self._options.absent_recheck)
            return
        with self._lock:
            self._failure = ""

    def _absent(self) -> None:
        """The collection is not served: an empty cache (what it held is deleted)."""
        assert self._optional is not None
        self._optional.absent(self.name)
        with self._lock:
            before = self._items
            self._items, self._bad, self._rv, self._failure = {}, {}, None, ""
            self._values = None
            if self._record:
                self._changed.update(before)
        if self._on_item is not None:
            for key, old in before.items():
                self._item(key, old, None)
        first = not self._synced.is_set()
        self._synced.set()
        if before and not first:
            self._notify()

    # ------------------------------------------------------------------ list

    def _relist(self) -> None:
        items: dict[Key, T] = {}
        bad: dict[Key, str] = {}
        token: str | None = None
        rv = ""
        while True:
            try:
                body = self._list_page(token)
            except ApiException as error:
                if error.status == 410 and token:
                    log.info("informer %s: continue token expired, listing again", self.name)
                    items, bad, token = {}, {}, None
                    continue
                raise
            meta = body.get("metadata") or {}
            if token is None:
                rv = str(meta.get("resourceVersion") or "")
            for raw in body.get("items") or []:
                self._convert_into(raw, items, bad)
            token = meta.get("continue") or None
            if not token:
                break
        if self._optional is not None:
            self._optional.present(self.name)
        with self._lock:
            before = self._items
            # An object equal to the cached one stays the very object (as for a watch
            # event), so only the keys that differ count as changed.
            for key, new in items.items():
                old = before.get(key)
                if old is not None and old == new:
                    items[key] = old
            differ = [k for k in before.keys() | items.keys() if before.get(k) is not items.get(k)]
            changed = bool(differ)
            if self._record:
                self._changed.update(differ)
            self._items, self._bad, self._rv, self._failure = items, bad, rv, ""
            if differ:  # the same objects: `take` hands the same tuple
                self._values = None
            self.relists += 1
        if self._on_item is not None:
            for key in differ:
                self._item(key, before.get(key), items.get(key))
        first = not self._synced.is_set()
        self._synced.set()
        log.debug("informer %s: listed %d objects at %s", self.name, len(items), rv)
        if changed and not first:
            self._notify()

    def _list_page(self, token: str | None) -> Mapping[str, Any]:
        kwargs: dict[str, Any] = {"limit": self._options.page_size}
        if token:
            kwargs["_continue"] = token
        response = self._lister(
            **kwargs,
            _preload_content=False,
            _request_timeout=self._options.request_timeout,
        )
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(body, Mapping):
            raise ValueError("list response is not an object")
        return body

    def _converted(self, raw: Mapping[str, Any]) -> T | _Rejected:
        """The model object, or why there is none: one malformed object is reported and
        skipped, never allowed to stop the list or the watch (and with it every change)."""
        try:
            return self._convert(raw)
        except ManifestError as error:
            return _Rejected(str(error))
        except Exception as error:
            log.exception("informer %s: unexpected error converting %s", self.name, key_of(raw))
            return _Rejected(f"unexpected {type(error).__name__} converting the object")

    def _convert_into(self, raw: Any, items: dict[Key, T], bad: dict[Key, str]) -> None:
        if not isinstance(raw, Mapping):
            return
        key = key_of(raw)
        converted = self._converted(raw)
        if isinstance(converted, _Rejected):
            bad[key] = converted.reason
        else:
            items[key] = converted

    # ------------------------------------------------------------------ watch

    def _watch(self) -> None:
        options = self._options
        timeout = max(1, int(random.uniform(options.watch_timeout, options.watch_timeout * 1.5)))
        try:
            response = self._lister(
                watch=True,
                resource_version=self._rv,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                _preload_content=False,
                _request_timeout=options.request_timeout,
            )
        except ApiException as error:
            if error.status == 410:
                raise Gone(str(error.reason)) from error
            raise
        self._response = response
        self.watches += 1
        with self._lock:
            self._failure = ""
        opened, events = time.monotonic(), 0
        try:
            if self._stopping.is_set():
                raise _Stopped
            for line in lines(response):
                if self._stopping.is_set():
                    raise _Stopped
                self._handle(json.loads(line))
                events += 1
        finally:
            self._response = None
            close(response)
        if not events and time.monotonic() - opened < min(1.0, timeout / 2):
            # A stream closed at once without a word (a proxy, say): back off, do not spin.
            raise WatchError("watch closed immediately")

    def _handle(self, event: Any) -> None:
        if not isinstance(event, Mapping):
            raise WatchError(f"watch event is not an object but {type(event).__name__}")
        kind = event.get("type")
        raw = event.get("object")
        if not isinstance(raw, Mapping):
            raise WatchError(f"watch event without object: {kind}")
        if kind == "ERROR":
            if raw.get("code") == 410:
                raise Gone(str(raw.get("message") or "expired"))
            raise WatchError(f"{raw.get('code')} {raw.get('reason')}: {raw.get('message')}")
        rv = resource_version(raw)
        changed = False
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            changed = self._apply(str(kind), raw)
        elif kind != "BOOKMARK":
            raise WatchError(f"unknown watch event type {kind!r}")
        self._gone_in_row = 0
        with self._lock:
            if rv:
                self._rv = rv
            if kind == "BOOKMARK":
                self.bookmarks += 1
        if changed:
            self._notify()

    def _apply(self, kind: str, raw: Mapping[str, Any]) -> bool:
        key = key_of(raw)
        with self._lock:
            before = self._items.get(key)
            self._bad.pop(key, None)
            after: T | _Rejected | None = None
            if kind != "DELETED":
                after = self._converted(raw)
            if after is None or isinstance(after, _Rejected):
                if isinstance(after, _Rejected):
                    self._bad[key] = after.reason
                if self._items.pop(key, None) is not None:
                    self._values = None
                after = None
            elif before is not None and before == after:
                # A change the model does not see (a status write, a label we do not
                # read): keep the very object, so whatever compute keeps by identity (a
                # route's outcome) stays valid.
                return False
            else:
                self._items[key] = after
                self._values = None
            if before == after:
                return False
            if self._record:
                self._changed.add(key)
        if self._on_item is not None:
            self._item(key, before, after)
        return True

    def _item(self, key: Key, before: T | None, after: T | None) -> None:
        assert self._on_item is not None
        try:
            self._on_item(key, before, after)
        except Exception:
            log.exception("informer %s: on_item failed for %s", self.name, key)

    def _notify(self) -> None:
        try:
            self._on_change()
        except Exception:
            log.exception("informer %s: on_change failed", self.name)
