"""The reconcile loop (controlplane/loop/): debounce, persist-before-publish, logging once,
failures; the loop's own thread and event loop with fake source, computation and ledger.

Every test here is marked `integration` (tests/helpers/levels.py)."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")
