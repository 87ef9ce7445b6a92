"""`nodeagent_malloc_bytes{state}`: the agent's C heap by state on its metrics endpoint, so
an operator can tell a rising RSS that is held memory (`in_use`) from one that malloc
keeps after frees (`free`) without a debugger (docs/operations.md, "Memory over time")."""

from __future__ import annotations

import pytest

from nodeagent.metrics import AgentMetrics
from tests.helpers.malloc import glibc_only

pytestmark = pytest.mark.unit

MIB = 1 << 20
BLOCKS = 512  # of 64 KiB: 32 MiB under any mmap threshold, in the heap


def _bytes(metrics: AgentMetrics, state: str) -> float:
    value = metrics.registry.get_sample_value("nodeagent_malloc_bytes", {"state": state})
    assert value is not None, f"no nodeagent_malloc_bytes{{state={state!r}}}"
    return value


@glibc_only
def test_the_malloc_bytes_follow_blocks_held_then_freed() -> None:
    """32 MiB of blocks held show in `in_use`; freed below the last one, still held (a hole
    malloc keeps, not a free top it would give back at once), they move to `free`."""
    metrics = AgentMetrics()
    before = _bytes(metrics, "in_use")
    blocks = [bytearray(64 * 1024) for _ in range(BLOCKS)]
    held, free_held = _bytes(metrics, "in_use"), _bytes(metrics, "free")
    assert held - before > 30 * MIB, (before, held)
    last = blocks[-1]  # the highest: the freed ones below it are no free top
    del blocks
    assert held - _bytes(metrics, "in_use") > 30 * MIB
    assert _bytes(metrics, "free") - free_held > 30 * MIB
    assert _bytes(metrics, "mapped") >= 0
    assert last
