"""The slot ledgers (controlplane/ledger/): the files ledger (SQLite), its bounded history,
corrupted or hostile slot state in every store; in process.

Every test here is marked `unit` (tests/helpers/levels.py)."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "unit")
