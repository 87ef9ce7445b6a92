"""The agent's memory around the write of haproxy.cfg after a runtime change: the file (16 MB
at 8,000 Services) is written from the render's sections, never joined into a second copy
of itself first. Joined, that copy is a block above malloc's mmap threshold alive through
the write and its fsync, on every change: 15.6 MiB of resident memory each time a sample
falls in that window (docs/findings.md, "Agent memory: the config joined for its write")."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import render
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.deltas import delta_between, hashed
from tests.helpers.haproxy_env import backend, snapshot

BACKENDS = 2000
SLOTS = 40  # about 2 KB a section: a file of about 4 MB


def _snap(ip: str, moved: str, version: int) -> pb.Snapshot:
    """`BACKENDS` backends of `SLOTS` slots, their endpoints on 127.x addresses that serve
    nothing (the slots are not checked); backend 0's first endpoint at `moved`."""
    backends = [
        backend(
            f"default_svc-{i:05d}_http",
            [(moved if (i, n) == (0, 0) else ip, 20000 + n) for n in range(SLOTS)],
            persistence=False,
            count=SLOTS,
        )
        for i in range(BACKENDS)
    ]
    return hashed(snapshot([], backends), version=version)


@pytest.mark.haproxy
def test_a_runtime_change_writes_the_config_without_a_second_copy_of_the_file(
    agents: AgentHarness,
) -> None:
    """A runtime change (an endpoint moved), its deferred write of haproxy.cfg waited for:
    the most Python memory alive during the apply and the write is under half the file's
    size (a buffer of `durable.PIECES_BUFFER` and the change's own objects), where the join
    alone is the whole file. The file written is the render's, byte for byte."""
    inst = agents.instance()
    applier = inst.applier
    net = agents.net
    v1 = _snap(f"{net}.21", f"{net}.21", 1)
    v2 = _snap(f"{net}.21", f"{net}.22", 2)
    first = applier.apply(v1)
    assert first.ok, first.error
    applier.files.config.flush()
    size = Path(inst.config_path).stat().st_size
    assert size > 3_000_000  # far above the write's buffer
    base = applier.applied_held
    assert base is not None
    held2, change = base.apply(delta_between(v1, v2))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = applier.apply(held2, change)
        applier.files.config.flush()  # the deferred write, waited for if in progress
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (result.ok, result.kind) == (True, ApplyPath.RUNTIME), result.error
    assert peak < size / 2, f"peak {peak:,} B during the apply and write of a {size:,} B file"
    assert Path(inst.config_path).read_text() == render(v2, applier.options)
