"""Durable files: the last applied snapshot and haproxy.cfg.

Both are written atomically (temp file, fsync, rename, fsync of the directory) so that a
crash leaves either the old or the new content, never a torn file HAProxy cannot start.
"""

from __future__ import annotations

import logging
import os

from nodeagent.safefile import read_regular
from peerplane.runtime.durable import atomic_write
from peerplane.v1 import peerplane_pb2 as pb

__all__ = ["SNAPSHOT_FILE", "StateStore", "atomic_write"]

SNAPSHOT_FILE = "snapshot.binpb"
# The largest snapshot the stream delivers (stream/client.py MAX_RECEIVE_BYTES): a bigger file is no
# snapshot of ours.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
log = logging.getLogger(__name__)


class StateStore:
    """The state dir: remembers what HAProxy runs across agent restarts."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        try:
            os.makedirs(state_dir, exist_ok=True)
        except OSError as e:  # serve anyway; every save says why it fails
            log.error("state dir %s unusable: %s", state_dir, e)

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.state_dir, SNAPSHOT_FILE)

    def save(self, snapshot: pb.Snapshot) -> None:
        self.save_bytes(snapshot.SerializeToString(deterministic=True))

    def save_bytes(self, data: bytes) -> None:
        """Save a serialized snapshot as is: the applier has its bytes in hand (parts of
        the held snapshot), re-serializing 2 MB per change would cost more than applying."""
        atomic_write(self.snapshot_path, data, 0o600)

    def load(self) -> pb.Snapshot | None:
        """The saved snapshot, or None when there is none. A file that cannot be one (a
        directory, a FIFO, unreadable, too large, not a snapshot) counts as none: logged,
        and the control plane sends the snapshot again; it must not stop the agent."""
        path = self.snapshot_path
        try:
            data = read_regular(path, MAX_SNAPSHOT_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            log.error("saved snapshot %s unusable, starting without it: %s", path, e.strerror or e)
            return None
        snapshot = pb.Snapshot()
        try:
            snapshot.ParseFromString(data)
        except Exception as e:  # DecodeError: treat as absent, the control plane resends
            log.error("saved snapshot %s is corrupt, starting without it: %s", path, e)
            return None
        return snapshot
