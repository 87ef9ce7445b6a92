"""peerplane/runtime/allocator.py: the agent and the control plane set glibc's malloc up
for a long life (capped arenas, a fixed mmap threshold) unless the environment set malloc
up itself.

docs/operations.md, "Memory over time"."""

from __future__ import annotations

import gc
import subprocess

import pytest

from peerplane.runtime import allocator
from tests.helpers.malloc import THREADS_PROBED, MallocSeen, glibc_only, malloc_after

pytestmark = pytest.mark.unit

TUNE = "from peerplane.runtime import allocator; print(allocator.tune())"


def test_the_settings_cap_arenas_and_fix_the_mmap_threshold_by_default() -> None:
    assert allocator.settings({}) == {
        allocator.M_ARENA_MAX: allocator.ARENA_MAX,
        allocator.M_MMAP_THRESHOLD: allocator.MMAP_THRESHOLD,
    }


@pytest.mark.parametrize("name", ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_malloc_settings_of_the_environment_win(name: str) -> None:
    assert allocator.settings({name: "4"}) == {}
    assert allocator.settings({name: ""}) != {}  # set but empty: not a setting


@glibc_only
def test_glibc_takes_the_settings_and_malloc_behaves_by_them() -> None:
    """Seen from what malloc does, in a fresh interpreter: threads share two arenas and a
    freed megabyte does not raise the mmap threshold."""
    assert malloc_after("") == ([], MallocSeen(THREADS_PROBED + 1, threshold_fixed=False))
    assert malloc_after(TUNE) == (["True"], MallocSeen(allocator.ARENA_MAX, threshold_fixed=True))


@glibc_only
def test_the_environment_keeps_its_own_malloc_settings() -> None:
    printed, seen = malloc_after(TUNE, {"MALLOC_ARENA_MAX": "8"})
    assert printed == ["False"]
    assert seen.arenas == THREADS_PROBED + 1  # eight allowed: each thread its own
    assert not seen.threshold_fixed


@glibc_only
def test_a_trim_starts_no_process_and_leaves_no_cyclic_garbage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent trims after applies, its heap frozen: a trim that looked glibc up again
    ran `ldconfig -p` (two subprocesses, about 2 ms) and made a ctypes class, a reference
    cycle, each time (docs/findings.md, "Agent memory: cycles on the delta path")."""
    allocator.trim()  # glibc looked up (once) before
    started: list[object] = []
    popen = subprocess.Popen

    def counted(*args: object, **kwargs: object) -> object:
        started.append(args)
        return popen(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", counted)
    gc.collect()
    gc.disable()
    try:
        allocator.trim()
        allocator.trim()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        garbage = [type(o).__qualname__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert started == [] and garbage == []
