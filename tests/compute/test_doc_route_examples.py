"""The route examples users copy from README.md, docs/annotations.md and
docs/operations.md: read beside the demo's Services and classes, each is served whole (no
rejection, every rule in the listener), and the status the operations guide shows is the
one computed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from controlplane.compute import compute
from controlplane.model import GATEWAY_GROUP, ClusterState, ObjectRef
from controlplane.routes.status import StatusKey, route_statuses
from controlplane.source.files import load_manifests

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "deploy" / "examples" / "demo"
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
STORE = StatusKey(GATEWAY_GROUP, "HTTPRoute", "default", "store")


def yaml_blocks(doc: str, start: str, end: str) -> list[str]:
    """The ```yaml blocks of `doc` from `start` to `end` (or the end of the file)."""
    text = (REPO / doc).read_text()
    first = text.index(start)
    last = text.find(end, first)
    section = text[first : last if last >= 0 else len(text)]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def demo_classes(*kinds: str) -> list[str]:
    """The demo's GatewayClass or IngressClass (routes.yaml), which the docs leave out."""
    parts = (DEMO / "routes.yaml").read_text().split("\n---\n")
    return [p for p in parts if any(f"\nkind: {kind}\n" in f"\n{p}" for kind in kinds)]


def load(folder: Path, routes: str) -> ClusterState:
    """The demo's manifests copied to `folder`, with `routes` as their routes.yaml."""
    shutil.copytree(DEMO, folder)
    (folder / "routes.yaml").write_text(routes)
    loaded = load_manifests(folder, SETTINGS)
    assert loaded.errors == []
    return loaded.state


def served(tmp_path: Path, routes: str) -> tuple[ClusterState, dict[int, int]]:
    """The demo with `routes`: its state and the rule count per listener port; fails on
    any rejection."""
    state = load(tmp_path / "manifests", routes)
    result = compute(state, {})
    assert [f"{r.object} {r.key}: {r.reason}" for r in result.rejections] == []
    listeners = result.workloads[WORKLOAD].http_listeners
    return state, {listener.port: len(listener.rules) for listener in listeners}


@pytest.mark.parametrize(
    ("doc", "start", "end", "classes", "rules"),
    [
        # README: an HTTPRoute of five rules and an Ingress of two paths, one port.
        ("README.md", "## Routes", "## Image", ("GatewayClass", "IngressClass"), {18080: 6}),
        # The reference: the demo's routes.yaml with the workload named, classes included.
        ("docs/annotations.md", "**Examples**", "\n## ", (), {18080: 6}),
        # The operations guide: its Ingress on the settings' port, its Gateway's port 80.
        ("docs/operations.md", "## Routes:", "To see what", ("GatewayClass",), {18080: 2, 80: 1}),
    ],
)
def test_doc_route_examples_are_served_whole(
    tmp_path: Path,
    doc: str,
    start: str,
    end: str,
    classes: tuple[str, ...],
    rules: dict[int, int],
) -> None:
    blocks = yaml_blocks(doc, start, end)
    assert len(blocks) >= 2, f"{doc}: no route examples between {start!r} and {end!r}"
    text = "\n---\n".join([*demo_classes(*classes), *blocks])
    _, found = served(tmp_path, text)
    assert found == rules


def test_operations_guide_status_examples_are_the_computed_ones(tmp_path: Path) -> None:
    guide = " ".join((REPO / "docs" / "operations.md").read_text().split())
    blocks = yaml_blocks("docs/operations.md", "## Routes:", "To see what")
    routes = "\n---\n".join([*demo_classes("GatewayClass"), *blocks])
    state, _ = served(tmp_path, routes)
    parent = route_statuses(state)[STORE]["parents"][0]
    assert f"controllerName: {parent['controllerName']}" in guide
    for condition in parent["conditions"]:
        shown = (
            f'{{type: {condition["type"]}, status: "{condition["status"]}", '
            f"reason: {condition['reason']}, message: {condition['message']}}}"
        )
        assert shown in guide
    # A misspelled backend: the condition and the Event message the guide quotes.
    broken = load(
        tmp_path / "broken", routes.replace("name: shop, port: 80}]", "name: shopp, port: 80}]")
    )
    (rejection,) = compute(broken, {}).rejections
    assert f"`{rejection.key}={rejection.value!r} rejected: {rejection.reason}`" in guide
    resolved = route_statuses(broken)[STORE]["parents"][0]["conditions"][1]
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert f"reason `BackendNotFound`, message `{resolved['message']}`" in guide
