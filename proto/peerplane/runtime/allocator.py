"""glibc's malloc, set for a process that lives for months: the agent and the control
plane, each at its start (docs/operations.md, "Memory over time").

Both handle multi-megabyte blocks per change in worker threads beside gRPC's own: the
agent renders and writes texts (`asyncio.to_thread`), the control plane computes in a
worker and encodes snapshots and deltas. By default glibc gives threads arenas of their
own (up to eight per core) and raises its mmap threshold to the largest block freed (up
to 32 MiB), so those blocks land in heaps that fragment: freed, but rarely given back,
and the resident memory creeps up over hours of changes. At start each process caps the
arenas (`M_ARENA_MAX`) and fixes the threshold (`M_MMAP_THRESHOLD`: a larger block is
mapped on its own and returned to the kernel when freed). Whatever the environment
already sets for malloc (`MALLOC_ARENA_MAX`, `MALLOC_MMAP_THRESHOLD_`, `GLIBC_TUNABLES`)
wins: then, and on a C library that is not glibc, nothing is changed.

Capped arenas still keep what they freed: the pages of a freed block in the middle of a
heap stay resident until a later block reuses them, so each render's transient blocks
leave a little more of the reservation touched and the resident memory climbs towards
the whole reservation over an hour. `trim` hands those free pages back (glibc's
`malloc_trim`, which since 2.8 releases whole free pages anywhere in every arena, not only
the top); the agent calls it after applies (`nodeagent/heap.py`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
M_ARENA_MAX = -8
ARENA_MAX = 2
MMAP_THRESHOLD = 256 * 1024  # bytes: a rendered listener or map file is mapped alone
OWN_SETTINGS = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")


def settings(environ: Mapping[str, str]) -> dict[int, int]:
    """The mallopt settings to make: none when the environment set malloc up itself."""
    if any(environ.get(name) for name in OWN_SETTINGS):
        return {}
    return {M_ARENA_MAX: ARENA_MAX, M_MMAP_THRESHOLD: MMAP_THRESHOLD}


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """glibc, or None on another C library. Loaded once: `find_library` runs `ldconfig -p`
    in two subprocesses (about 2 ms), and each `CDLL` makes a class of its own (a
    reference cycle), which a trim after every few applies would repeat."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: musl has mallopt too)
    except (OSError, AttributeError):
        return None
    libc.mallopt.argtypes, libc.mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    libc.malloc_trim.argtypes, libc.malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    return libc


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (2.33 and later): every field a size_t."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True, slots=True)
class Usage:
    """malloc's bytes by state: what a rising RSS is made of. `in_use` rising is memory
    held (a leak, or more to hold); `free` rising with `in_use` flat is malloc keeping
    what was freed (fragmentation: `trim` gives its whole free pages back)."""

    in_use: int  # handed out from the arenas and not freed (Python's pymalloc arenas apart)
    free: int  # free in the arenas: reserved, resident or not
    mapped: int  # in blocks above the mmap threshold, each mapped on its own


@functools.cache
def _mallinfo2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    libc = _glibc()
    try:
        fn = libc.mallinfo2 if libc is not None else None  # glibc 2.33 and later
    except AttributeError:
        return None
    if fn is not None:
        fn.argtypes, fn.restype = (), _MallInfo2
    return fn


def usage() -> Usage | None:
    """malloc's bytes by state now (every arena; O(free chunks), well under a
    millisecond); None without glibc's `mallinfo2`."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return Usage(in_use=info.uordblks, free=info.fordblks, mapped=info.hblkhd)


def trim() -> bool:
    """Give malloc's free pages back to the kernel (`malloc_trim(0)`); whether any went.
    A no-op (False) on a C library that is not glibc."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


def tune(environ: Mapping[str, str] = os.environ) -> bool:
    """Apply `settings` (call before threads start); whether glibc took them all."""
    wanted = settings(environ)
    if not wanted:
        log.info("malloc: left as the environment set it")
        return False
    libc = _glibc()
    if libc is None:
        log.info("malloc: not glibc, left as it is")
        return False
    took = all(libc.mallopt(param, value) == 1 for param, value in wanted.items())
    if not took:
        log.warning("malloc: glibc refused a setting of %s", wanted)
    return took
