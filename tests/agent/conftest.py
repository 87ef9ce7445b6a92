"""The node agent: render, changes, applier, HAProxy driver, checks, versions, reloads,
client, transport, metrics; most against real HAProxy (marked `haproxy` too).

Every test here is marked `integration` (tests/helpers/levels.py), but the pure ones, which
say `unit`. `agents` is the harness of the tests that run whole agents."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")


@pytest.fixture
def agents(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[AgentHarness]:
    """The agent harness on the HAProxy under test (each installed version): instances,
    clients, readiness; everything it started is stopped by PID at the end."""
    harness = AgentHarness(tmp_path, haproxy_bin.path)
    try:
        yield harness
    finally:
        harness.close()
