"""Test levels by folder: each test folder's conftest.py marks its own tests with one level,
unless a test names its own (a pure test in an integration folder is `unit`).

A conftest's `pytest_collection_modifyitems` sees every collected item of the session, not
only its folder's, so the folder is matched by path here. The markers are declared in
pyproject.toml ([tool.pytest.ini_options] markers); `-m` selects on them.
"""

from __future__ import annotations

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
        if folder not in Path(item.path).resolve().parents:
            continue
        if any(item.get_closest_marker(name) is not None for name in LEVELS):
            continue
        item.add_marker(marker)


def mark_haproxy(items: list[pytest.Item]) -> None:
    """Every test that takes `haproxy_bin` runs a real HAProxy: mark it `haproxy`."""
    for item in items:
        if "haproxy_bin" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.haproxy)
