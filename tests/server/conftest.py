"""The control plane's server: stream, protocol, admission, auth, inspection, store,
reconcile, TLS, observability, `controlplane serve`; real gRPC on loopback.

Every test here is marked `integration` (tests/helpers/levels.py)."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")
