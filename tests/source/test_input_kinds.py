"""The table of input kinds is the one place a kind is written: every row reaches the
Kubernetes informers, the folder source, the manifest index, `ClusterState`, the
ClusterRole and the fake API server, and the checklist "Adding an input kind" in
docs/design.md names files that exist, one per step."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from controlplane import model
from controlplane.kube.source import KubernetesSource
from controlplane.model import ClusterObject, ClusterState, NamespacedObject, ObjectRef
from controlplane.source.files import load_manifests
from controlplane.source.kinds import INPUT_KINDS, InputKind, Selection
from tests.kubeapi.server import API_PATHS, CLUSTER_SCOPED, PLURALS
from tests.source.test_manifests_fuzz import TEMPLATES
from tests.system.test_deploy_manifests import ALLOWED_READ

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
ROWS = pytest.mark.parametrize("row", INPUT_KINDS, ids=lambda row: row.kind)


def checklist() -> list[str]:
    """The numbered steps of the design's "Adding an input kind"."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("\n## Adding an input kind\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. (.*(?:\n   .*)*)", section, re.M)


def test_the_checklist_names_one_existing_file_per_step() -> None:
    steps = checklist()
    assert len(steps) >= 5
    for step in steps:
        files = re.findall(r"`([\w./-]+\.(?:py|yaml|md))`", step)
        assert len(files) == 1, step
        assert (ROOT / files[0]).is_file(), files[0]


def test_the_checklist_names_the_table_and_the_model() -> None:
    named = " ".join(checklist())
    for path in ("controlplane/source/kinds.py", "controlplane/model.py"):
        assert f"`{path}`" in named


def test_every_cluster_state_field_has_one_row() -> None:
    fields = [row.field for row in INPUT_KINDS]
    # Every field a state is made of (`changes` describes the state, it is not a kind).
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(ClusterState) if f.compare)
    assert len({row.kind for row in INPUT_KINDS}) == len(INPUT_KINDS)
    assert len({row.model for row in INPUT_KINDS}) == len(INPUT_KINDS)
    for row in INPUT_KINDS:
        base = NamespacedObject if row.namespaced else ClusterObject
        assert issubclass(row.model, base), row.kind
        assert row.model.__name__ in model.__all__, row.kind


def test_every_row_has_an_informer() -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    try:
        source = KubernetesSource(api, settings=SETTINGS)
        assert list(source.informers) == [row.kind for row in INPUT_KINDS]
        without = KubernetesSource(api, settings=None)
        assert list(without.informers) == [
            row.kind for row in INPUT_KINDS if row.selection is not Selection.SETTINGS
        ]
        several = {row.kind for row in INPUT_KINDS if len(row.versions) > 1}
        assert set(source.served_versions) == several
        optional = {row.optional for row in INPUT_KINDS if row.optional is not None}
        assert set(source.optional_groups) == optional
    finally:
        api.close()


def test_every_row_is_read_from_a_folder_into_its_field(tmp_path: Path) -> None:
    """Through the folder source's conversion and the manifest index's assembly."""
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(list(TEMPLATES.values())))
    loaded = load_manifests(tmp_path, SETTINGS)
    assert loaded.errors == []
    for row in INPUT_KINDS:
        value: Any = getattr(loaded.state, row.field)
        found = (value,) if row.selection is Selection.SETTINGS else value
        assert [type(obj) for obj in found] == [row.model], row.kind


def _rbac_reads() -> set[tuple[str, str]]:
    documents = yaml.safe_load_all((ROOT / "deploy/base/controlplane-rbac.yaml").read_text())
    granted = set()
    for document in documents:
        if document and document.get("kind") in ("Role", "ClusterRole"):
            for rule in document["rules"]:
                if {"list", "watch"} <= set(rule["verbs"]):
                    for group in rule["apiGroups"]:
                        granted |= {(group, plural) for plural in rule["resources"]}
    return granted


@ROWS
def test_every_row_is_granted_and_allowed(row: InputKind[Any]) -> None:
    assert (row.group, row.plural) in _rbac_reads()
    assert (row.group, row.plural) in ALLOWED_READ


@ROWS
def test_every_row_is_served_by_the_fake_api_server(row: InputKind[Any]) -> None:
    assert PLURALS[row.kind] == row.plural
    prefix = f"apis/{row.group}" if row.group else "api"
    assert API_PATHS[row.plural] in {f"{prefix}/{version}" for version in row.versions}
    assert (row.plural in CLUSTER_SCOPED) == (not row.namespaced)
