"""The files HAProxy reads beside the agent: haproxy.cfg and the route map files.

Written atomically (a reader sees the old file or the new one, never half), read back to
compare or to put back; every failure is a retryable `ApplyError` (a full disk, a path
taken by a directory, a missing permission may be repaired, and the same snapshot then
applies without a new one). A route map file is written whole, but after a runtime change
its lines are those of the last write patched with the change's few entries (`MapLines`),
not rendered again from 20,000 entries: the file follows the runtime commands at C speed.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterable, Mapping

from nodeagent.apply import saved
from nodeagent.apply.outcome import ApplyError
from nodeagent.config.listeners import MapEntries
from nodeagent.haproxy.commands import MapUpdate


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


class HAProxyFiles:
    """haproxy.cfg at `config_path` and the route map files in `maps_dir`."""

    def __init__(self, config_path: str, maps_dir: str) -> None:
        self.config_path = config_path
        self.maps_dir = maps_dir
        self._written: dict[str, MapLines] = {}  # each map file as last written

    def write_config(self, cfg: str | bytes) -> None:
        """Retryable when it fails: a full disk or a path taken by a directory may be
        repaired, and the same snapshot then applies without a new one."""
        try:
            saved.atomic_write(self.config_path, cfg.encode() if isinstance(cfg, str) else cfg)
        except OSError as e:
            raise ApplyError(
                f"cannot write {self.config_path}: {e.strerror or e}", retryable=True
            ) from e

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
        """The file as HAProxy would read it, to compare with what a change renders."""
        return read_file(self.config_path)

    def read_text(self) -> str | None:
        """The file before a reload, to put back if HAProxy refuses the new one."""
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
