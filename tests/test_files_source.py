"""The manifests-folder source and `controlplane compute`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from controlplane.model import ObjectRef
from controlplane.source.files import FilesSource, load_manifests

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "deploy" / "examples" / "demo"
SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
WORKLOAD = "haproxy-system/DaemonSet/haproxy"


def run_compute(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "compute", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_demo_folder_loads_without_errors() -> None:
    loaded = load_manifests(DEMO, SETTINGS)
    assert loaded.errors == []
    assert {s.name for s in loaded.state.services} == {"shop", "catalog", "db"}
    assert {p.name for p in loaded.state.haproxy_pods} == {"haproxy-7x2kq", "haproxy-m4r9t"}
    assert loaded.state.settings is not None
    assert loaded.state.settings.data["http-port"] == "18080"


def test_compute_prints_the_demo_snapshots() -> None:
    done = run_compute("--source", f"files:{DEMO}")
    assert done.returncode == 0, done.stderr
    (snapshot,) = json.loads(done.stdout)
    assert snapshot["workload"] == WORKLOAD
    assert snapshot["version"] == "1"
    assert [b["name"] for b in snapshot["backends"]] == [
        "default_catalog_http",
        "default_db_tcp",
        "default_shop_http",
    ]
    shop = snapshot["backends"][2]
    assert shop["balance"] == "source"
    assert shop["persistence"] == {"tableSize": "1048576", "expireMs": "1800000"}
    assert [s.get("address") for s in shop["slots"][:4]] == [
        "127.0.2.1",
        "127.0.2.2",
        "127.0.2.3",
        None,
    ]
    assert snapshot["tcpFrontends"] == [{"port": 15432, "backend": "default_db_tcp"}]


def test_compute_single_workload_and_unknown_workload() -> None:
    one = run_compute("--source", f"files:{DEMO}", "--workload", WORKLOAD)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["workload"] == WORKLOAD
    missing = run_compute("--source", f"files:{DEMO}", "--workload", "x/DaemonSet/y")
    assert missing.returncode == 1
    assert WORKLOAD in missing.stderr


def test_compute_with_state_file_keeps_slots_across_runs(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    state = tmp_path / "slots.json"
    first = run_compute(
        "--source", f"files:{folder}", "--state", str(state), "--workload", WORKLOAD
    )
    assert first.returncode == 0, first.stderr
    assert json.loads(state.read_text())["backends"]["default_shop_http"]["count"] == 8
    shop = folder / "shop.yaml"
    shop.write_text(shop.read_text().replace('["127.0.2.1"]', '["127.0.2.9"]'))
    second = run_compute(
        "--source", f"files:{folder}", "--state", str(state), "--workload", WORKLOAD
    )
    slots = next(
        b for b in json.loads(second.stdout)["backends"] if b["name"] == "default_shop_http"
    )
    addresses = [s.get("address") for s in slots["slots"][:3]]
    assert addresses == ["127.0.2.9", "127.0.2.2", "127.0.2.3"]  # survivors kept 2 and 3


def test_malformed_files_are_reported_with_their_path_and_the_rest_computes(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    (folder / "broken.yaml").write_text("kind: Service\nmetadata: [unclosed\n")
    (folder / "nameless.yaml").write_text("kind: Service\nspec: {}\n---\n- just a list\n")
    (folder / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    loaded = load_manifests(folder, SETTINGS)
    joined = "\n".join(loaded.errors)
    assert "broken.yaml" in joined
    assert "nameless.yaml: document 1: metadata.name is missing" in joined
    assert "nameless.yaml: document 2: not a Kubernetes object" in joined
    assert "binary.yaml" in joined
    assert {s.name for s in loaded.state.services} == {"shop", "catalog", "db"}
    done = run_compute("--source", f"files:{folder}")
    assert done.returncode == 0
    assert "broken.yaml" in done.stderr
    assert len(json.loads(done.stdout)[0]["backends"]) == 3


def test_unreadable_state_file_is_reported_and_rebuilt(tmp_path: Path) -> None:
    state = tmp_path / "slots.json"
    state.write_text("{not json")
    done = run_compute("--source", f"files:{DEMO}", "--state", str(state))
    assert done.returncode == 0
    assert "slots rebuilt from sorted order" in done.stderr
    assert json.loads(state.read_text())["format"] == 1


def test_files_source_notices_changes(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    changed = threading.Event()
    calls: list[int] = []

    def on_change() -> None:
        calls.append(1)
        if len(calls) > 1:
            changed.set()

    source = FilesSource(folder, SETTINGS, poll_interval=0.05)
    source.start(on_change)
    try:
        assert len(calls) == 1
        (folder / "db.yaml").unlink()
        assert changed.wait(5)
        assert {s.name for s in source.state().services} == {"shop", "catalog"}
    finally:
        source.stop()
