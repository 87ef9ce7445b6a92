"""The route model (controlplane/routes/): HTTPRoutes, Ingresses, TLSRoutes and TCPRoutes to
listeners, hostname and SNI ownership, certificates from Secrets, TLS termination, route
status documents, hostile route strings; in process.

Every test here is marked `unit` (tests/helpers/levels.py)."""

from __future__ import annotations

import pytest

from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "unit")
