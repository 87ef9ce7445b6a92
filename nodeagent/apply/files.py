"""The files HAProxy reads beside the agent: haproxy.cfg and the route map files.

Written atomically (a reader sees the old file or the new one, never half), read back to
compare or to put back; every failure is a retryable `ApplyError` (a full disk, a path
taken by a directory, a missing permission may be repaired, and the same snapshot then
applies without a new one).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from nodeagent.apply import saved
from nodeagent.apply.outcome import ApplyError
from nodeagent.config.listeners import MapEntries, map_file


class HAProxyFiles:
    """haproxy.cfg at `config_path` and the route map files in `maps_dir`."""

    def __init__(self, config_path: str, maps_dir: str) -> None:
        self.config_path = config_path
        self.maps_dir = maps_dir

    def write_config(self, cfg: str | bytes) -> None:
        """Retryable when it fails: a full disk or a path taken by a directory may be
        repaired, and the same snapshot then applies without a new one."""
        try:
            saved.atomic_write(self.config_path, cfg.encode() if isinstance(cfg, str) else cfg)
        except OSError as e:
            raise ApplyError(
                f"cannot write {self.config_path}: {e.strerror or e}", retryable=True
            ) from e

    def write_maps(self, maps: Mapping[str, MapEntries], before: Mapping[str, MapEntries]) -> None:
        """Each route map file whose entries differ from `before` (or that is missing),
        atomically; files `before` had and `maps` has not are removed. Retryable when it
        fails, like the config."""
        try:
            if maps:
                os.makedirs(self.maps_dir, exist_ok=True)
            for path, entries in maps.items():
                old = before.get(path)
                if old is not None and (old is entries or old == entries) and os.path.exists(path):
                    continue
                saved.atomic_write(path, map_file(entries))
            for path in before.keys() - maps.keys():
                if os.path.exists(path):
                    os.unlink(path)
        except OSError as e:
            raise ApplyError(
                f"cannot write the route maps in {self.maps_dir}: {e.strerror or e}",
                retryable=True,
            ) from e

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
