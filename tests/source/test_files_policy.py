"""SourceIPPersistencePolicy in folder mode, end to end through `controlplane compute`: the
demo's shop with its persistence annotation replaced by a policy gives the same snapshot,
and a policy the annotation outranks, or that names no Service, is reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.source.test_files import DEMO, WORKLOAD, run_compute

POLICY = """\
apiVersion: peerplane.dev/v1alpha1
kind: SourceIPPersistencePolicy
metadata:
  name: sticky-shop
  namespace: default
spec:
  targetRefs:
    - group: ""
      kind: Service
      name: shop
      sectionName: http
  tableSize: 64k
  expire: 10m
"""
ANNOTATIONS = """\
    haproxy.org/source-ip-persistence: "true"
    haproxy.org/source-ip-persistence-size: 64k
    haproxy.org/source-ip-persistence-expire: 10m
"""


def snapshot(folder: Path) -> dict[str, Any]:
    done = run_compute("--source", f"files:{folder}", "--workload", WORKLOAD)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def demo_copy(tmp_path: Path, name: str) -> tuple[Path, Path]:
    folder = tmp_path / name
    shutil.copytree(DEMO, folder)
    return folder, folder / "shop.yaml"


def test_a_policy_serves_what_the_annotation_serves(tmp_path: Path) -> None:
    annotated, shop = demo_copy(tmp_path, "annotated")
    text = shop.read_text()
    assert '    haproxy.org/source-ip-persistence: "true"\n' in text
    shop.write_text(text.replace('    haproxy.org/source-ip-persistence: "true"\n', ANNOTATIONS))
    by_policy, shop = demo_copy(tmp_path, "policy")
    shop.write_text(text.replace('    haproxy.org/source-ip-persistence: "true"\n', ""))
    (by_policy / "policy.yaml").write_text(POLICY)
    without, shop = demo_copy(tmp_path, "without")
    shop.write_text(text.replace('    haproxy.org/source-ip-persistence: "true"\n', ""))

    expected = snapshot(annotated)
    served = snapshot(by_policy)
    backend = {b["name"]: b for b in served["backends"]}["default_shop_http"]
    assert backend["persistence"] == {"tableSize": "65536", "expireMs": "600000"}
    assert served == expected
    plain = {b["name"]: b for b in snapshot(without)["backends"]}["default_shop_http"]
    assert "persistence" not in plain


def test_a_conflicted_or_targetless_policy_is_reported(tmp_path: Path) -> None:
    folder, _ = demo_copy(tmp_path, "demo")  # the demo's shop keeps its annotation
    lost = POLICY.replace("name: sticky-shop", "name: lost").replace("name: shop", "name: gone")
    (folder / "policy.yaml").write_text(POLICY + "---\n" + lost)
    done = run_compute("--source", f"files:{folder}", "--workload", WORKLOAD)
    assert done.returncode == 0, done.stderr
    shop = {b["name"]: b for b in json.loads(done.stdout)["backends"]}["default_shop_http"]
    # The annotation's values, not the policy's.
    assert shop["persistence"] == {"tableSize": "1048576", "expireMs": "1800000"}
    assert "SourceIPPersistencePolicy default/sticky-shop" in done.stderr
    assert "Conflicted" in done.stderr and "annotation wins" in done.stderr
    assert "SourceIPPersistencePolicy default/lost" in done.stderr
    assert "TargetNotFound" in done.stderr
