"""Atomic file replacement, shared by both sides (slot state, haproxy.cfg, snapshots).

Temp file in the same directory, fsync, rename, fsync of the directory: a crash leaves
either the old or the new content, never a torn file.

The content may come in pieces, written in order: the agent's haproxy.cfg (16 MB at
8,000 Services) is its sections, and joining them first would hold a second copy of the
whole file, alive through the write and the fsync, on every change (docs/findings.md,
"Agent memory: the config joined for its write").
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable

PIECES_BUFFER = 1 << 20  # bytes: pieces are copied into it, one write(2) each time it fills


def atomic_write(
    path: str | os.PathLike[str], data: bytes | Iterable[bytes], mode: int = 0o644
) -> None:
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", dir=directory)
    try:
        pieces: Iterable[bytes]
        if isinstance(data, bytes):
            buffering, pieces = -1, (data,)
        else:
            buffering, pieces = PIECES_BUFFER, data
        with os.fdopen(fd, "wb", buffering=buffering) as f:
            f.writelines(pieces)
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
