"""Atomic file replacement, shared by both sides (slot state, haproxy.cfg, snapshots).

Temp file in the same directory, fsync, rename, fsync of the directory: a crash leaves
either the old or the new content, never a torn file.
"""

from __future__ import annotations

import os
import tempfile


def atomic_write(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
