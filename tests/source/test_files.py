"""The manifests-folder source and `controlplane compute`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from controlplane.compute import compute
from controlplane.ledger.sqlite import ledger_document
from controlplane.model import ObjectRef
from controlplane.publish import encode
from controlplane.source.files import FilesSource, load_manifests
from nodeagent.config.listeners import map_file
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.held import Held
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
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
    assert ledger_document(state)["backends"]["default_shop_http"]["count"] == 8
    shop = folder / "shop.yaml"
    shop.write_text(shop.read_text().replace('["127.0.2.1"]', '["127.0.2.9"]'))
    second = run_compute(
        "--source", f"files:{folder}", "--state", str(state), "--workload", WORKLOAD
    )
    slots = next(
        b for b in json.loads(second.stdout)["backends"] if b["name"] == "default_shop_http"
    )
    addresses = [s.get("address") for s in slots["slots"][:4]]
    # Survivors kept 2 and 3; the newcomer takes never-used slot 4, not slot 1, which was
    # freed now and may still be named by stick entries (docs/design.md, "Slots").
    assert addresses == [None, "127.0.2.2", "127.0.2.3", "127.0.2.9"]
    freed = ledger_document(state)["backends"]["default_shop_http"]["freed"]
    assert [(entry[0], *entry[2:]) for entry in freed] == [(1, "127.0.2.1", 8888)]


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


def test_corrupt_state_file_is_reported_kept_aside_and_rebuilt(tmp_path: Path) -> None:
    state = tmp_path / "slots.json"
    state.write_text("{not json")
    done = run_compute("--source", f"files:{DEMO}", "--state", str(state))
    assert done.returncode == 0
    assert "slots rebuilt from sorted order" in done.stderr
    assert ledger_document(state)["format"] == 2
    assert (tmp_path / "slots.json.corrupt").read_text() == "{not json"


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


def test_an_atomic_write_is_one_change(tmp_path: Path) -> None:
    """A file written to a temporary name then renamed over a manifest (editors,
    `kubectl cp`, the benchmarks) notifies the reconcile loop once, so the loop computes
    it at once instead of taking it for a burst (docs/design.md, the debounce)."""
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    calls: list[int] = []
    source = FilesSource(folder, SETTINGS, poll_interval=0.05, rescan_interval=60.0)
    source.start(lambda: calls.append(1))
    try:
        catalog = folder / "catalog.yaml"
        written = folder / "catalog.yaml.tmp"
        written.write_text(catalog.read_text().replace("catalog.example.com", "c2.example.com"))
        os.replace(written, catalog)
        wait_until(lambda: len(calls) >= 2)
        time.sleep(0.3)  # a second notification would come within the 10 ms grouping step
        assert len(calls) == 2
    finally:
        source.stop()


# ------------------------------------------------------------ hostile manifests

LAUGHS = ["    a: &a [" + ", ".join(['"lol"'] * 9) + "]"] + [
    f"    {level}: &{level} [{', '.join([f'*{prev}'] * 9)}]"
    for prev, level in zip("abcdefgh", "bcdefghi", strict=True)
]
BOMB = "kind: Service\nmetadata:\n  name: bomb\n  annotations:\n" + "\n".join(LAUGHS) + "\n"
HOSTILE_FILES = {
    "spec-list.yaml": "kind: Service\nmetadata: {name: x1}\nspec: [1]\n",
    "ports-int.yaml": "kind: Service\nmetadata: {name: x2}\nspec: {ports: 5}\n",
    "status-int.yaml": (
        "kind: Pod\nmetadata: {name: x3, labels: {app.kubernetes.io/component: haproxy}}\n"
        "status: 5\n"
    ),
    "conditions-int.yaml": (
        "kind: EndpointSlice\nmetadata: {name: x4}\nendpoints: [{addresses: [a], conditions: 5}]\n"
    ),
    "list-items-int.yaml": "kind: List\nitems: 7\n",
    "deep-flow.yaml": "kind: Service\nmetadata: {name: x5, annotations: {a: "
    + "[" * 5000
    + "]" * 5000
    + "}}\n",
    "deep-block.yaml": "kind: ConfigMap\nmetadata: {name: x6}\ndata:\n"
    + "".join("  " * i + "- \n" for i in range(1, 400))
    + "  " * 400
    + "x\n",
    "alias-bomb.yaml": BOMB,
    "alias-cycle.yaml": "kind: Service\nmetadata: {name: x7, annotations: &a {b: *a}}\n",
    "huge-int.yaml": "kind: Service\nmetadata: {name: x8}\nspec: {ports: [{port: 1"
    + "0" * 5000
    + "}]}\n",
    "bad-date.yaml": "kind: Service\nmetadata: {name: x9, creationTimestamp: 2026-13-45}\n",
    "annotation-map.yaml": "kind: Service\nmetadata: {name: x10, annotations: {a: {b: c}}}\n",
    "name-list.yaml": (
        "kind: Service\nmetadata: {name: x11}\nspec: {ports: [{name: [h], port: 80}]}\n"
    ),
}


def hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    for name, text in HOSTILE_FILES.items():
        (folder / name).write_text(text)
    return folder


def test_wrong_typed_manifests_are_reported_with_their_path_and_skipped(tmp_path: Path) -> None:
    assert len(BOMB) < 600  # 9 levels of 9 aliases: 4 x 10^8 nodes
    folder = hostile_folder(tmp_path)
    loaded = load_manifests(folder, SETTINGS)
    for name in HOSTILE_FILES:
        (line,) = [e for e in loaded.errors if e.startswith(f"{folder / name}: ")]
        assert len(line) < 400 and "\n" not in line
    reasons = "\n".join(loaded.errors)
    assert "spec is not a map but a list" in reasons
    assert "spec.ports is not a list but 5" in reasons
    assert "status is not a map but 5" in reasons
    assert "endpoints[0].conditions is not a map but 5" in reasons
    assert "kind List: items is not a list but 7" in reasons
    assert "aliases expand to more than 100000 nodes" in reasons
    assert "nested deeper than 100 levels" in reasons
    assert "alias *a is used inside its own anchor" in reasons
    assert {s.name for s in loaded.state.services} == {"shop", "catalog", "db"}
    assert {p.name for p in loaded.state.haproxy_pods} == {"haproxy-7x2kq", "haproxy-m4r9t"}
    assert len(loaded.state.endpoint_slices) == 3


def test_compute_reports_hostile_manifests_and_computes_the_rest(tmp_path: Path) -> None:
    done = run_compute("--source", f"files:{hostile_folder(tmp_path)}")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for name in HOSTILE_FILES:
        assert f"/{name}: " in done.stderr
    assert len(json.loads(done.stdout)[0]["backends"]) == 3


OUT_OF_RANGE_RULES = """\
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mixed, namespace: default, creationTimestamp: "2026-01-03T00:00:00Z"}
spec:
  parentRefs: [{name: web}]
  hostnames: [mixed.demo.example.com]
  rules:
    - matches: [{path: {type: PathPrefix, value: /good}}]
      backendRefs: [{name: shop, port: 80}]
    - matches: [{path: {type: PathPrefix, value: /moved}}]
      filters:
        - {type: RequestRedirect, requestRedirect: {port: 99999}}
    - matches: [{path: {type: PathPrefix, value: /split}}]
      backendRefs: [{name: shop, port: 80, weight: 90}, {name: catalog, port: 80, weight: -5}]
"""


def test_a_rule_value_out_of_range_refuses_that_rule_and_the_good_rules_serve(
    tmp_path: Path,
) -> None:
    """A redirect port of 99999 or a weight of -5 refused the whole HTTPRoute, its good
    rules with it. Now that rule alone is refused and reported, as a hostile path is."""
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    (folder / "mixed.yaml").write_text(OUT_OF_RANGE_RULES)
    loaded = load_manifests(folder, SETTINGS)
    assert loaded.errors == []
    snapshot = compute(loaded.state, {}).workloads[WORKLOAD]
    (listener,) = [lst for lst in snapshot.http_listeners if lst.port == 18080]
    mixed = [r for r in listener.rules if r.source.startswith("HTTPRoute default/mixed ")]
    assert [(r.source, r.path.value) for r in mixed] == [
        ("HTTPRoute default/mixed rule 0 match 0", "/good")
    ]
    assert [f"{w.key}: {w.reason}" for w in snapshot.warnings if w.name == "mixed"] == [
        "spec.rules[1].filters[0]: port 99999 is not in 1-65535; rule not served",
        "spec.rules[2].backendRefs[1].weight: weight is not in 0-1000000; rule not served",
    ]


def test_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    from controlplane.source.yamlload import MAX_FILE_BYTES

    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    big = folder / "big.yaml"
    big.write_text(
        "kind: ConfigMap\nmetadata: {name: big}\ndata: {a: " + "x" * MAX_FILE_BYTES + "}\n"
    )
    loaded = load_manifests(folder, SETTINGS)
    assert loaded.errors == [f"{big}: larger than {MAX_FILE_BYTES} bytes; not read"]
    assert len(loaded.state.services) == 3


def test_a_list_document_reports_its_bad_item_and_keeps_the_others(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text(
        "kind: List\nitems:\n"
        "- {kind: Service, metadata: {name: good}, spec: {ports: [{name: http, port: 80}]}}\n"
        "- {kind: Service, metadata: {name: bad}, spec: 5}\n"
    )
    loaded = load_manifests(tmp_path, SETTINGS)
    assert loaded.errors == [
        f"{tmp_path / 'list.yaml'}: document 1 items[1]: spec is not a map but 5"
    ]
    assert [s.name for s in loaded.state.services] == ["good"]


SERVICE_PORT = (
    "kind: Service\nmetadata: {{name: svc}}\nspec:\n  ports:\n"
    "  - {{name: {name}, port: 8080}}\n  - {{name: web, port: 80}}\n"
)


@pytest.mark.parametrize(
    "name", ['"8080"', '"a--b"', '"-web"', '"web-"', "Web", '"abcdefghijklmnop"', '"we b"', '""']
)
def test_service_port_names_are_validated_as_kubernetes_does(tmp_path: Path, name: str) -> None:
    (tmp_path / "svc.yaml").write_text(SERVICE_PORT.format(name=name))
    loaded = load_manifests(tmp_path, SETTINGS)
    (error,) = loaded.errors
    assert error.startswith(f"{tmp_path / 'svc.yaml'}: document 1: spec.ports[0].name")
    assert loaded.state.services == ()


@pytest.mark.parametrize("name", ["abcdefghijklmno", "h2c-8080", "x", "8080x"])
def test_valid_service_port_names_are_kept(tmp_path: Path, name: str) -> None:
    (tmp_path / "svc.yaml").write_text(SERVICE_PORT.format(name=name))
    loaded = load_manifests(tmp_path, SETTINGS)
    assert loaded.errors == []
    (svc,) = loaded.state.services
    assert [p.name for p in svc.ports] == [name, "web"]


def test_port_named_8080_does_not_collide_with_an_unnamed_port_8080(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    (folder / "clash.yaml").write_text(
        "kind: Service\nmetadata:\n  name: shop\n  namespace: team\n"
        "  annotations: {haproxy.org/expose: 'true'}\nspec:\n  ports:\n  - {port: 8080}\n"
        "---\nkind: Service\nmetadata:\n  name: shop\n  namespace: team\n"
        "  annotations: {haproxy.org/expose: 'true'}\nspec:\n  ports:\n"
        "  - {name: '8080', port: 81}\n"
    )
    loaded = load_manifests(folder, SETTINGS)
    assert any(
        "document 2: spec.ports[0].name '8080' is not a valid port name" in e for e in loaded.errors
    )
    done = run_compute("--source", f"files:{folder}")
    assert done.returncode == 0, done.stderr
    names = [b["name"] for b in json.loads(done.stdout)[0]["backends"]]
    assert names.count("team_shop_8080") == 1


def test_duplicate_objects_are_reported_with_both_paths_and_the_first_kept(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    first = folder / "shop.yaml"
    second = folder / "zz-copy.yaml"
    second.write_text(
        first.read_text().replace(
            "haproxy.org/load-balance: source", "haproxy.org/load-balance: first"
        )
        + "\n---\n"
        + (folder / "haproxy.yaml").read_text().replace("127.0.1.", "127.0.9.")
        + "\n---\n"
        + (folder / "settings.yaml").read_text().replace('"18080"', '"19090"')
    )
    loaded = load_manifests(folder, SETTINGS)
    duplicates = sorted(e for e in loaded.errors if e.startswith("duplicate "))
    assert duplicates, loaded.errors
    assert sorted(loaded.errors) == duplicates
    assert any(
        e.startswith("duplicate Service default/shop: ")
        and f"{second} (document 1) skipped, {first} (document 1) kept" in e
        for e in duplicates
    )
    assert any(e.startswith("duplicate Pod haproxy-system/haproxy-7x2kq: ") for e in duplicates)
    assert any(
        e.startswith("duplicate ConfigMap haproxy-system/haproxy-settings") for e in duplicates
    )
    (shop,) = [s for s in loaded.state.services if s.name == "shop"]
    assert shop.annotations["haproxy.org/load-balance"] == "source"
    assert sorted(p.ip for p in loaded.state.haproxy_pods) == ["127.0.1.1", "127.0.1.2"]
    assert loaded.state.settings is not None
    assert loaded.state.settings.data["http-port"] == "18080"


def test_duplicate_haproxy_pod_yields_one_peer_and_a_valid_config(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    pods = (folder / "haproxy.yaml").read_text()
    (folder / "more-pods.yaml").write_text(pods.replace("127.0.1.", "127.0.8."))
    loaded = load_manifests(folder, SETTINGS)
    (content,) = encode(compute(loaded.state, {}).workloads).values()
    snapshot = content.message(1)
    assert [p.name for p in snapshot.peers.peers] == ["haproxy-7x2kq", "haproxy-m4r9t"]
    config = tmp_path / "haproxy.cfg"
    # The demo's routes (routes.yaml) render into map files beside haproxy.cfg.
    maps = tmp_path / "maps"
    maps.mkdir()
    options = RenderOptions(pod_name="haproxy-7x2kq", maps_dir=str(maps))
    rendered = render_held(Held.from_snapshot(snapshot), options)
    for name, entries in rendered.maps.items():
        (maps / Path(name).name).write_bytes(map_file(entries))
    config.write_text(rendered.text())
    done = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_watch_survives_a_hostile_file_and_follows_later_edits(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    source = FilesSource(folder, SETTINGS, poll_interval=0.02)
    source.start(lambda: None)
    try:
        (folder / name).write_text(HOSTILE_FILES[name])
        wait_until(lambda: any(name in e for e in source.errors()))
        (folder / name).unlink()
        wait_until(lambda: source.errors() == [])
        (folder / "db.yaml").unlink()
        wait_until(lambda: {s.name for s in source.state().services} == {"shop", "catalog"})
    finally:
        source.stop()


def test_watch_outlives_an_exception_in_one_pass(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    shutil.copytree(DEMO, folder)
    calls: list[int] = []

    def on_change() -> None:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the reconcile loop failed once")

    source = FilesSource(folder, SETTINGS, poll_interval=0.02)
    source.start(on_change)
    try:
        (folder / "db.yaml").unlink()
        wait_until(lambda: len(calls) == 2)
        (folder / "catalog.yaml").unlink()
        wait_until(lambda: len(calls) == 3)
        assert {s.name for s in source.state().services} == {"shop"}
    finally:
        source.stop()


def test_serve_starts_with_a_hostile_file_and_keeps_following_edits(tmp_path: Path) -> None:
    folder = hostile_folder(tmp_path)
    with ServeProcess("--source", f"files:{folder}") as serve:
        serve.wait_for(re.compile(r"published haproxy-system/DaemonSet/haproxy v1 "))
        assert json.loads(grpcurl(serve.address, "grpc.health.v1.Health/Check")) == {
            "status": "SERVING"
        }
        serve.wait_for(re.compile(re.escape(f"{folder / 'alias-bomb.yaml'}: aliases expand")))
        late = folder / "late.yaml"
        late.write_text(HOSTILE_FILES["spec-list.yaml"])
        serve.wait_for(re.compile(re.escape(f"{late}: document 1: spec is not a map")))
        late.unlink()
        shop = folder / "shop.yaml"
        shop.write_text(shop.read_text().replace('["127.0.2.3"]', '["127.0.2.4"]'))
        serve.wait_for(re.compile(r"published haproxy-system/DaemonSet/haproxy v2 "))
        assert "Traceback" not in "\n".join(serve.lines)
        assert serve.terminate() == 0


def test_compute_refuses_haproxy_pods_outside_the_workload_flags() -> None:
    out = run_compute("--source", f"files:{DEMO}", "--workload-namespaces", "elsewhere")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    refused = [ln for ln in out.stderr.splitlines() if "rejected Pod haproxy-system/" in ln]
    assert refused and all("--workload-namespaces" in ln for ln in refused)
    kept = run_compute(
        "--source", f"files:{DEMO}", "--workload-kinds", "DaemonSet", "--max-workloads", "1"
    )
    assert [s["workload"] for s in json.loads(kept.stdout)] == [WORKLOAD]
    bad = run_compute("--source", f"files:{DEMO}", "--max-workloads", "0")
    assert bad.returncode == 2 and "--max-workloads" in bad.stderr
