"""Linux inotify through ctypes: the events of watched directories, with what each says.

`watchfiles` reports only "added, modified, deleted" once no change came for its grouping
step, so an atomic write (a temporary file, then a rename) waited that step (10-20 ms)
before anything was read. The kernel says more: a rename into place (IN_MOVED_TO) or a
writer closing the file (IN_CLOSE_WRITE) means the file is whole and can be read at once;
only a file still being written (IN_CREATE, IN_MODIFY with no close yet) needs the wait
(`folder_watch.py`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

WATCHED = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
# The file is whole (renamed into place, its writer closed it) or gone: read it now.
SETTLED = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE
# A watched directory itself went away (removed, moved, its filesystem unmounted).
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED

_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
_READ_SIZE = 64 * 1024


@dataclass(frozen=True, slots=True)
class Event:
    path: Path  # the directory's path joined with the entry's name ("" : the directory)
    mask: int

    @property
    def settled(self) -> bool:
        """Whether the entry can be read now: no writer is known to be still at it."""
        return bool(self.mask & (SETTLED | IN_ISDIR))


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def available() -> bool:
    return _LIBC is not None


class Inotify:
    """One inotify instance: `add` directories, `read` their events (non-blocking)."""

    def __init__(self) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "inotify is not available here")
        fd = _LIBC.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            number = ctypes.get_errno()
            raise OSError(number, f"inotify_init1: {os.strerror(number)}")
        self._fd: int = fd
        self._paths: dict[int, Path] = {}

    def fileno(self) -> int:
        return self._fd

    def add(self, directory: Path) -> None:
        """Watch `directory` (not recursively); OSError when it cannot be watched."""
        assert _LIBC is not None
        wd = _LIBC.inotify_add_watch(self._fd, os.fsencode(directory), WATCHED)
        if wd < 0:
            number = ctypes.get_errno()
            raise OSError(number, f"inotify_add_watch {directory}: {os.strerror(number)}")
        self._paths[wd] = directory

    def read(self) -> list[Event]:
        """The events queued now ([] when none); an overflow is an event with no path."""
        try:
            data = os.read(self._fd, _READ_SIZE)
        except BlockingIOError:
            return []
        events = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            offset += _HEADER.size
            name = data[offset : offset + length].rstrip(b"\0")
            offset += length
            directory = self._paths.get(wd)
            if directory is None:  # an overflow (wd -1) or a watch already dropped
                events.append(Event(Path(), mask))
                continue
            events.append(Event(directory / os.fsdecode(name) if name else directory, mask))
        return events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Inotify:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
