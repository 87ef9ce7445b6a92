"""Everything against the fake Kubernetes API server (tests/kubeapi).

Every test here is marked `integration` (tests/helpers/levels.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.levels import mark_folder
from tests.helpers.replicas import shop_cluster
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import write_kubeconfig


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    """Service shop (two endpoints), two HAProxy pods of one DaemonSet (test files with
    another cluster define their own `api`)."""
    server = shop_cluster()
    yield server
    server.stop()


@pytest.fixture
def kubeconfig(api: FakeKubeAPI, tmp_path: Path) -> Path:
    return write_kubeconfig(api.url, tmp_path / "kubeconfig")
