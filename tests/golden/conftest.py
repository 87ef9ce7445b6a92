"""Golden route features: input.yaml -> `controlplane compute` -> snapshot.json ->
`nodeagent render` -> haproxy.cfg and map files (tests/golden/README.md).

Every test here is marked `unit` (tests/helpers/levels.py), but for the `haproxy -c` check
of each feature's config, which takes the `haproxy_bin` fixture."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "unit")
