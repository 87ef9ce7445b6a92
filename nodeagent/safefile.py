"""Read a small file the agent does not fully control (its token, its saved snapshot)
without ever blocking on it.

`open()` of a FIFO waits for a writer forever and a directory or a device is no file at
all: the file is opened with O_NONBLOCK and the type of what was opened is checked with
fstat (not of the path, which may be swapped between a check and the open). Only a
regular file is read, up to a bound.
"""

from __future__ import annotations

import errno
import os
import stat


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file `path`; OSError when it is missing, of another type
    (FIFO, directory, device, socket), unreadable, or larger than `limit` bytes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise OSError(errno.EINVAL, f"{kind} ({stat.filemode(mode)})", path)
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
