"""The files HAProxy reads beside the agent: haproxy.cfg and the route map files.

Written atomically (a reader sees the old file or the new one, never half), read back to
compare or to put back; every failure is a retryable `ApplyError` (a full disk, a path
taken by a directory, a missing permission may be repaired, and the same snapshot then
applies without a new one). A route map file is written whole, but after a runtime change
its lines are those of the last write patched with the change's few entries (`MapLines`),
not rendered again from 20,000 entries: the file follows the runtime commands at C speed.

haproxy.cfg after a runtime change is written after the ACK, by a thread of its own
(`ConfigFile.defer`: 17.8 MB written and fsynced at 8,000 Services, which HAProxy does
not read to serve the change; written from its sections, never joined into a second copy
of the whole file), and at once before anything reads it: a reload, a
start or restart of HAProxy, the agent's own reads (`ConfigFile.flush`). docs/design.md,
"What an ACK promises".
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence

from nodeagent.apply import saved
from nodeagent.apply.outcome import ApplyError
from nodeagent.config.listeners import MapEntries
from nodeagent.haproxy.commands import MapUpdate

log = logging.getLogger(__name__)


class MapLines:
    """One map file as last written: the entries it was written from, their keys sorted
    and its lines in that order (`listeners.map_file`'s bytes are their join)."""

    __slots__ = ("entries", "keys", "lines")

    def __init__(self, entries: MapEntries) -> None:
        self.entries = entries
        self.keys = sorted(entries)
        self.lines = [f"{k} {entries[k]}\n" for k in self.keys]

    def data(self) -> bytes:
        return "".join(self.lines).encode()

    def patched(self, entries: MapEntries, updates: Iterable[MapUpdate]) -> bool:
        """Move the lines by `updates` (add, set and del by key, as sent to HAProxy) to
        `entries`: O(changed) bisections and list moves. False when they do not lead
        there (the caller renders the file whole from `entries`)."""
        keys, lines = self.keys, self.lines
        moved = []
        for u in updates:
            at = bisect_left(keys, u.key)
            present = at < len(keys) and keys[at] == u.key
            line = f"{u.key} {u.value}\n"
            if u.op == "del" and present:
                del keys[at], lines[at]
            elif u.op == "set" and present:
                lines[at] = line
            elif u.op == "add" and not present:
                keys.insert(at, u.key)
                lines.insert(at, line)
            else:
                return False
            moved.append(u)
        self.entries = entries
        return len(keys) == len(entries) and all(
            entries.get(u.key) == (None if u.op == "del" else u.value) for u in moved
        )


class ConfigFile:
    """haproxy.cfg: written at once (`write`), or later by a thread of its own (`defer`),
    the latest content only, never an older one over a newer."""

    def __init__(self, path: str, on_failure: Callable[[], None] | None = None) -> None:
        self.path = path
        self.on_failure = on_failure  # a deferred write failed (a metric)
        self._writing = threading.Lock()  # held for a whole write: one at a time
        self._lock = threading.Lock()  # guards the fields below, never held while writing
        # the content still to write: the whole file, or its pieces in order (a rendered
        # config's sections, `Rendered.pieces`: never joined, docs/findings.md)
        self._deferred: Callable[[], bytes | Sequence[bytes]] | None = None
        self._failed: str | None = None  # why the last deferred write failed
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def pending(self) -> bool:
        """A content is deferred and not written yet."""
        return self._deferred is not None

    @property
    def failed(self) -> str | None:
        """Why the last deferred write failed (None once a write succeeded): the file
        may be older than what HAProxy runs, and the next apply writes it first."""
        return self._failed

    def write(self, cfg: str | bytes) -> None:
        """`cfg` now, replacing any deferred content (older: the applier defers and writes
        in the order it applies). Retryable ApplyError when it fails: a full disk or a
        path taken by a directory may be repaired, and the same snapshot then applies
        without a new one."""
        data = cfg.encode() if isinstance(cfg, str) else cfg
        with self._writing:
            with self._lock:
                self._deferred = None
            self._write(data)

    def defer(self, content: Callable[[], bytes | Sequence[bytes]]) -> None:
        """Write `content()` (the file, or its pieces in order) soon, on the writer
        thread; a later `defer`, `write` or `flush` supersedes it. Never waits for a write
        in progress."""
        with self._lock:
            closed = self._closed
            if not closed:
                self._deferred = content
        if closed:  # stopping: no thread to write it later
            self.write(_joined(content()))
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="haproxy-cfg-writer", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def flush(self) -> None:
        """The deferred content written now, waiting for a write in progress: before
        anything reads the file. ApplyError (retryable) when the write fails; the content
        stays deferred."""
        with self._writing:
            with self._lock:
                content, self._deferred = self._deferred, None
            if content is None:
                return
            try:
                self._write(content())
            except Exception as e:
                with self._lock:
                    if self._deferred is None:
                        self._deferred = content
                    self._failed = e.reason if isinstance(e, ApplyError) else repr(e)
                raise

    def close(self) -> None:
        """Write what is deferred (logged when it cannot be) and end the writer thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join()
        try:
            self.flush()
        except ApplyError as e:
            log.error("haproxy.cfg not written at stop: %s", e.reason)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
            try:
                self.flush()
            except ApplyError as e:  # the next apply writes it first, or NACKs
                log.error("deferred write of haproxy.cfg failed: %s", e.reason)
                if self.on_failure is not None:
                    self.on_failure()
            except Exception:  # a fault nobody foresaw must not end the writer
                log.exception("deferred write of haproxy.cfg failed")
                if self.on_failure is not None:
                    self.on_failure()

    def _write(self, data: bytes | Sequence[bytes]) -> None:
        try:
            saved.atomic_write(self.path, data)
        except OSError as e:
            raise ApplyError(f"cannot write {self.path}: {e.strerror or e}", retryable=True) from e
        with self._lock:
            self._failed = None


def _joined(data: bytes | Sequence[bytes]) -> bytes:
    return data if isinstance(data, bytes) else b"".join(data)


class HAProxyFiles:
    """haproxy.cfg at `config_path` and the route map files in `maps_dir`."""

    def __init__(
        self, config_path: str, maps_dir: str, on_failure: Callable[[], None] | None = None
    ) -> None:
        self.config_path = config_path
        self.maps_dir = maps_dir
        self.config = ConfigFile(config_path, on_failure)
        self._written: dict[str, MapLines] = {}  # each map file as last written

    def write_config(self, cfg: str | bytes) -> None:
        """Now (`ConfigFile.write`)."""
        self.config.write(cfg)

    def write_maps(
        self,
        maps: Mapping[str, MapEntries],
        before: Mapping[str, MapEntries],
        updates: Iterable[MapUpdate] = (),
    ) -> None:
        """Each route map file whose entries differ from `before` (or that is missing),
        atomically; files `before` had and `maps` has not are removed. `updates`: the
        runtime commands that moved HAProxy from `before` to `maps`, which patch the
        lines last written of a file that held `before` (else it is rendered whole).
        Retryable when it fails, like the config."""
        by_path: dict[str, list[MapUpdate]] = {}
        for u in updates:
            by_path.setdefault(u.path, []).append(u)
        try:
            if maps:
                os.makedirs(self.maps_dir, exist_ok=True)
            for path, entries in maps.items():
                old = before.get(path)
                if old is not None and (old is entries or old == entries) and os.path.exists(path):
                    if (known := self._written.get(path)) is not None and known.entries is old:
                        known.entries = entries  # equal: the file holds these too
                    continue
                self._write_map(path, entries, old, by_path.get(path))
            for path in before.keys() - maps.keys():
                self._written.pop(path, None)
                if os.path.exists(path):
                    os.unlink(path)
        except OSError as e:
            raise ApplyError(
                f"cannot write the route maps in {self.maps_dir}: {e.strerror or e}",
                retryable=True,
            ) from e

    def _write_map(
        self,
        path: str,
        entries: MapEntries,
        old: MapEntries | None,
        updates: list[MapUpdate] | None,
    ) -> None:
        known = self._written.pop(path, None)  # back only once the file holds it
        # the file holds `old`: the same object, or an equal one (a render since that
        # wrote nothing, one dict comparison at C speed)
        fits = (
            known is not None and old is not None and (known.entries is old or known.entries == old)
        )
        if not (
            fits and updates is not None and known is not None and known.patched(entries, updates)
        ):
            known = MapLines(entries)
        saved.atomic_write(path, known.data())
        self._written[path] = known

    def read_bytes(self) -> bytes | None:
        """The file as HAProxy would read it, to compare with what a change renders
        (the deferred content written first)."""
        self.config.flush()
        return read_file(self.config_path)

    def read_text(self) -> str | None:
        """The file before a reload, to put back if HAProxy refuses the new one (the
        deferred content written first: it is what HAProxy runs)."""
        self.config.flush()
        data = read_file(self.config_path)
        return None if data is None else data.decode("utf-8", errors="replace")


def read_file(path: str) -> bytes | None:
    """Its bytes, None when absent; a retryable ApplyError when it cannot be read (a
    directory in its place, no permission): the fault may be repaired."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ApplyError(f"cannot read {path}: {e.strerror or e}", retryable=True) from e
