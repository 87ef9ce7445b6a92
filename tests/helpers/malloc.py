"""The C heap's live bytes (glibc `mallinfo2`): what protobuf (upb) arenas and other C
allocations hold, which neither `gc` nor `tracemalloc` sees; and how a process's malloc is
set (arenas, mmap threshold), seen from what it does."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from peerplane.runtime import allocator
from peerplane.runtime.allocator import OWN_SETTINGS

glibc_only = pytest.mark.skipif(
    "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""), reason="glibc only"
)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    return libc


def _mapped() -> int:
    found = allocator.usage()
    assert found is not None
    return found.mapped


def live_c_heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (heap and mmapped blocks), after a
    garbage collection; the test is skipped where glibc's `mallinfo2` is missing."""
    gc.collect()
    found = allocator.usage()
    if found is None:
        pytest.skip("needs glibc's mallinfo2")
    return found.in_use + found.mapped


# How glibc's malloc is set, seen from what it does (it has no call that reads its
# settings back): run in a fresh interpreter after the code under test set it, or not.
THREADS_PROBED = 4  # more than `peerplane.runtime.allocator.ARENA_MAX`, under 8 per core


def arenas() -> int:
    """glibc's arenas now (the main heap and each thread arena), from `malloc_info`."""
    libc = _libc()
    buffer, size = ctypes.c_char_p(), ctypes.c_size_t()
    libc.open_memstream.restype = ctypes.c_void_p
    stream = libc.open_memstream(ctypes.byref(buffer), ctypes.byref(size))
    libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
    libc.fclose.argtypes = (ctypes.c_void_p,)
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    xml = ctypes.string_at(buffer, size.value).decode()
    libc.free(ctypes.cast(buffer, ctypes.c_void_p))
    return xml.count("<heap nr=")


def arenas_with_threads(threads: int = THREADS_PROBED) -> int:
    """glibc's arenas while `threads` threads each hold a block: by default each new
    thread gets an arena of its own (up to 8 per core); with `M_ARENA_MAX` they share."""
    libc = _libc()
    together = threading.Barrier(threads + 1)
    counted = threading.Event()

    def hold() -> None:
        block = libc.malloc(64)
        together.wait()
        counted.wait()
        libc.free(block)

    workers = [threading.Thread(target=hold) for _ in range(threads)]
    for worker in workers:
        worker.start()
    together.wait()
    found = arenas()
    counted.set()
    for worker in workers:
        worker.join()
    return found


def mmap_threshold_is_fixed(size: int = 1 << 20) -> bool:
    """Whether a block of `size` bytes is mapped on its own after one of that size was
    freed: by default glibc raises its mmap threshold to the largest block freed and puts
    the next one in the heap; with `M_MMAP_THRESHOLD` set the threshold stays."""
    if allocator.usage() is None:
        raise RuntimeError("needs glibc's mallinfo2")
    libc = _libc()
    libc.free(libc.malloc(size))
    before = _mapped()
    block = libc.malloc(size)
    mapped = _mapped() - before >= size
    libc.free(block)
    return bool(mapped)


@dataclass(frozen=True, slots=True)
class MallocSeen:
    """How a process's malloc behaved (`arenas_with_threads`, `mmap_threshold_is_fixed`)."""

    arenas: int
    threshold_fixed: bool


_PROBE = (
    "\nimport json\nfrom tests.helpers.malloc import arenas_with_threads, mmap_threshold_is_fixed"
    "\nprint(json.dumps([arenas_with_threads(), mmap_threshold_is_fixed()]))\n"
)
ROOT = Path(__file__).resolve().parents[2]


def _printed_fresh(code: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The lines `code` printed in a fresh interpreter (malloc is set per process) without
    the environment's malloc settings (plus `env`)."""
    clean = {k: v for k, v in os.environ.items() if k not in OWN_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.splitlines()


def malloc_after(code: str, env: Mapping[str, str] | None = None) -> tuple[list[str], MallocSeen]:
    """Run `code` in a fresh interpreter without the environment's malloc settings (plus
    `env`), then probe its malloc: what `code` printed, and what the probe saw."""
    *printed, probed = _printed_fresh(code + _PROBE, env)
    arenas, fixed = json.loads(probed)
    return printed, MallocSeen(arenas, fixed)


# A render's transient blocks, in a fresh interpreter with the agent's malloc settings:
# 48 MiB of 64 KiB blocks (under the mmap threshold: in the heap) with a small block kept
# after each, so freeing them leaves holes in the middle of the heap, not a free top.
_HOLES = """
import json, sys
from peerplane.runtime import allocator
allocator.tune()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
blocks, kept = [], []
for n in range(768):
    blocks.append(bytes(64 * 1024))
    kept.append(bytes(600 + n))  # over pymalloc's 512 bytes: in the heap, between them
before = rss()
del blocks
freed = rss()
{settle}
print(json.dumps([before, freed, rss()]))
"""


def rss_around_holes(settle: str) -> tuple[int, int, int]:
    """Resident bytes in a fresh interpreter (the agent's malloc settings) with 48 MiB of
    blocks alive, after they are freed (holes between kept blocks), and after `settle`."""
    before, freed, settled = json.loads(_printed_fresh(_HOLES.replace("{settle}", settle))[-1])
    return before, freed, settled
