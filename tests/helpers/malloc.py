"""The C heap's live bytes (glibc `mallinfo2`): what protobuf (upb) arenas and other C
allocations hold, which neither `gc` nor `tracemalloc` sees."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

import pytest


class _MallInfo2(ctypes.Structure):
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


def _mallinfo2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2  # glibc 2.33 and later
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def live_c_heap_bytes() -> int:
    """Bytes malloc has handed out and not had back (heap and mmapped blocks), after a
    garbage collection; the test is skipped where glibc's `mallinfo2` is missing."""
    if _MALLINFO2 is None:
        pytest.skip("needs glibc's mallinfo2")
    gc.collect()
    info = _MALLINFO2()
    return int(info.uordblks + info.hblkhd)
