"""The Helm chart (deploy/chart/peerplane) under real Helm: lint, golden renders, the
Kubernetes schemas, the kustomize base it must equal, the values schema's refusals, the
values table in the docs, `make chart`. Marked `integration` (they run the helm binary
tests/helm/build makes; `helm install` on the real API server is in tests/realkube)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.helm import Helm, helm_binary
from tests.helpers.levels import mark_folder


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_folder(items, __file__, "integration")


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    home: Path = tmp_path_factory.mktemp("helm-home")
    return Helm(helm_binary(), home)
