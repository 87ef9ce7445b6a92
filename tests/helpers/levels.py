"""Test levels by folder: each test folder's conftest.py marks its own tests with one level,
unless a test names its own (a pure test in an integration folder is `unit`).

A conftest's `pytest_collection_modifyitems` sees every collected item of the session, not
only its folder's, so the folder is matched by path here. The markers are declared in
pyproject.toml ([tool.pytest.ini_options] markers); `-m` selects on them.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

LEVELS = ("unit", "integration", "system")


def mark_folder(items: list[pytest.Item], conftest_file: str, level: str) -> None:
    """Add the `level` marker to every item collected from the folder of `conftest_file`
    that does not name its own level: a pure test in an integration folder (the module's
    `pytestmark = pytest.mark.unit`) stays `unit` only, so `-m unit` selects it and
    `-m integration` does not."""
    if level not in LEVELS:
        raise ValueError(f"unknown test level {level!r}; known: {', '.join(LEVELS)}")
    folder = Path(conftest_file).resolve().parent
    marker = getattr(pytest.mark, level)
    for item in items:
        if not in_folder(item, folder):
            continue
        if any(item.get_closest_marker(name) is not None for name in LEVELS):
            continue
        item.add_marker(marker)


def in_folder(item: pytest.Item, folder: Path) -> bool:
    """Whether `item` was collected from under `folder` (resolved)."""
    return _under(str(item.path), str(folder))


@functools.cache
def _under(path: str, folder: str) -> bool:
    """Each folder's conftest asks about every item of the session (2,652 items, 15
    folders): answered once per test file and folder, not resolved per item and folder
    (about 1 s of the collection's 8 s of CPU, docs/findings.md)."""
    return Path(path).resolve().is_relative_to(folder)


def mark_haproxy(items: list[pytest.Item]) -> None:
    """Every test that takes `haproxy_bin` runs a real HAProxy: mark it `haproxy`."""
    for item in items:
        if "haproxy_bin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.haproxy)
