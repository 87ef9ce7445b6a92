"""Suite-wide fixtures: the HAProxy versions every real-HAProxy test runs against, and
the root logger put back after each test. Property tests draw the same examples on every
run (a gate must not fail on what a new random draw finds); PEERPLANE_FUZZ_RANDOM=1
explores new ones."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.helpers.haproxy_versions import HAProxyBinary, installed
from tests.helpers.levels import mark_haproxy

_ran: set[str] = set()

settings.register_profile("gate", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile("explore" if os.environ.get("PEERPLANE_FUZZ_RANDOM") else "gate")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize `haproxy_bin` over every installed HAProxy series (skip when none)."""
    if "haproxy_bin" in metafunc.fixturenames:
        binaries = list(installed())
        if binaries:
            metafunc.parametrize(  # indirect: through the fixture, which records the run
                "haproxy_bin",
                binaries,
                ids=[f"haproxy{b.series}" for b in binaries],
                indirect=True,
            )
        else:
            metafunc.parametrize(
                "haproxy_bin",
                [pytest.param(None, marks=pytest.mark.skip(reason="no haproxy installed"))],
                indirect=True,
            )


@pytest.fixture
def haproxy_bin(request: pytest.FixtureRequest) -> HAProxyBinary:
    binary: HAProxyBinary = request.param
    _ran.add(binary.version)
    return binary


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """A CLI run in-process (`main([...])`) points the root logger at the stderr pytest
    captured for that test; a thread of a later test logging there would print "Logging
    error: I/O operation on closed file". Put the root handlers and level back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes `haproxy_bin` is a real-HAProxy test whether or not it says so."""
    mark_haproxy(items)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = ", ".join(f"{b.version} ({b.path})" for b in installed()) or "none"
    ran = ", ".join(sorted(_ran)) or "none"
    terminalreporter.write_line(f"HAProxy installed: {found}; real-HAProxy tests ran on: {ran}")
