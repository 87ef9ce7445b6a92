"""nodeagent/allocator.py: the agent sets glibc's malloc up for a long life (capped
arenas, a fixed mmap threshold) unless the environment set malloc up itself.

docs/operations.md, "Agent memory"."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nodeagent import allocator

pytestmark = pytest.mark.unit


def test_the_agent_caps_arenas_and_fixes_the_mmap_threshold_by_default() -> None:
    assert allocator.settings({}) == {
        allocator.M_ARENA_MAX: allocator.ARENA_MAX,
        allocator.M_MMAP_THRESHOLD: allocator.MMAP_THRESHOLD,
    }


@pytest.mark.parametrize("name", ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES"])
def test_malloc_settings_of_the_environment_win(name: str) -> None:
    assert allocator.settings({name: "4"}) == {}
    assert allocator.settings({name: ""}) != {}  # set but empty: not a setting


def _tune_in_a_fresh_process(env: dict[str, str]) -> str:
    """`tune()` in a new interpreter (malloc settings are per process)."""
    code = "from nodeagent import allocator; print(allocator.tune())"
    clean = {k: v for k, v in os.environ.items() if k not in allocator.OWN_SETTINGS}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
        check=True, timeout=30,
    )  # fmt: skip
    return done.stdout.strip()


def test_glibc_takes_the_settings_and_the_environment_keeps_its_own() -> None:
    if not hasattr(os, "confstr") or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        pytest.skip("glibc only")
    assert _tune_in_a_fresh_process({}) == "True"
    assert _tune_in_a_fresh_process({"MALLOC_ARENA_MAX": "8"}) == "False"
