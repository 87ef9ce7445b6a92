"""`controlplane status` (controlplane/fleetstatus/): its pure rows, verdict and diff (`unit`), and
the command over the agent's transports against a real `controlplane serve`.

Every test here is marked `integration` (tests/helpers/levels.py), but the pure ones, which
say `unit`."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")
