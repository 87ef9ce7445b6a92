"""Smoke tests of the benchmark harness: behaviour only, never a time."""

from __future__ import annotations

import dataclasses
import http.server
import importlib
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

from controlplane.compute import compute
from controlplane.model import ClusterState
from controlplane.publish import encode
from peerplane import parts
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench import __main__ as bench_cli
from tests.bench import apiservers as apiservers_bench
from tests.bench import before as bench_before
from tests.bench import deltas as bench_deltas
from tests.bench import e2e as e2e_bench
from tests.bench import failover as failover_bench
from tests.bench import fanout as fanout_bench
from tests.bench import haproxy as haproxy_bench
from tests.bench import persistence as persistence_bench
from tests.bench import realapi, routeskube, scalefolder, stability
from tests.bench import retention as retention_bench
from tests.bench import route_delta as route_delta_bench
from tests.bench import route_profile as route_profile_bench
from tests.bench import routes as routes_bench
from tests.bench import scale as scale_bench
from tests.bench import soak as soak_bench
from tests.bench import summary as bench_summary
from tests.bench import tls as tls_bench
from tests.bench import tls_rotation as tls_rotation_bench
from tests.bench.__main__ import main as bench_main
from tests.bench.common import Result, big_cluster, percentile, work_dir
from tests.helpers.fleet import HAPROXY_PODS, Fleet, haproxy_binary
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.netns import PodNetwork


def test_sticky_slots_never_move_a_surviving_pod_and_replicas_agree() -> None:
    figures = stability.simulate(clients=200, pods=20, events=60, seed=11)
    design = figures["design"]
    assert design["broken_clients"] == 0
    assert design["slot_moves"] == 0
    assert design["settled_mismatch"] == 0
    assert design["settled_mismatch_max"] == 0
    # The comparison is meaningful: re-sorting on every change does break sessions.
    assert figures["upstream-resort"]["broken_clients"] > 0


def test_quick_run_writes_results_json_and_prints_figures_beside_their_targets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick path `make bench` takes (no flag, BENCH_FULL unset), on two cheap
    benchmarks: results.json and the one table, each figure with its module's target."""
    monkeypatch.delenv(bench_cli.FULL_ENV, raising=False)
    out = tmp_path / "results.json"
    assert bench_main(["compute", "stability", "--results", str(out)]) == 0
    entries = json.loads(out.read_text())
    names = {entry["name"] for entry in entries}
    assert {"compute.full", "compute.one_change_total", "stability.design.broken_clients"} <= names
    for entry in entries:
        assert set(entry) == {"name", "value", "unit", "parameters", "machine"}
        assert isinstance(entry["value"], int | float)
        assert set(entry["machine"]) == {"cores", "python"}
    # Quick sizes: the compute curve stops at 8k endpoints (full: 160k).
    assert max(e["parameters"].get("endpoints", 0) for e in entries) < 40_000
    printed = capsys.readouterr().out
    assert printed.startswith("quick run;")
    rows = {line.split()[1]: line for line in printed.splitlines() if line.startswith("compute ")}
    assert "< 5 ms at 40k endpoints" in rows["one_change_total"]
    assert "< 300 ms at 40k endpoints" in rows["full"]
    assert "wall time:" in printed and "FAILED" not in printed


def test_bench_size_switch_and_registry() -> None:
    """`--full` or BENCH_FULL=1 (`make bench-full`) picks the full sizes, `--quick` wins
    over the variable; every registered benchmark has a `run(quick=...)`."""
    assert not bench_cli.wants_full(False, False, {})
    assert not bench_cli.wants_full(False, False, {"BENCH_FULL": "0"})
    assert bench_cli.wants_full(False, False, {"BENCH_FULL": "1"})
    assert not bench_cli.wants_full(False, True, {"BENCH_FULL": "1"})
    assert bench_cli.wants_full(True, False, {})
    names = [b.name for b in bench_cli.BENCHMARKS]
    assert len(names) == len(set(names))
    for benchmark in bench_cli.BENCHMARKS:
        module = importlib.import_module(benchmark.module)
        assert "quick" in inspect.signature(module.run).parameters, benchmark.name
        for pattern in getattr(module, "TARGETS", {}):
            assert isinstance(pattern, str) and pattern, benchmark.name
    with pytest.raises(SystemExit):
        bench_main(["--quick", "--full"])


def test_a_benchmarks_work_dir_is_removed_after_it_and_kept_when_it_fails() -> None:
    """Benchmarks left a folder per run in /tmp (a real API server's etcd: 65 MB): removed
    when the measurement ends, kept for its logs when it raises."""
    with work_dir("bench-smoke-") as done:
        (done / "server.log").write_text("ok")
    assert not done.exists()
    with pytest.raises(RuntimeError), work_dir("bench-smoke-") as failed:
        (failed / "server.log").write_text("why")
        raise RuntimeError("measurement failed")
    assert (failed / "server.log").read_text() == "why"
    shutil.rmtree(failed)


def test_summary_table_shows_targets_failures_and_what_tells_same_named_figures_apart() -> None:
    targets = {"scale.*.change_to_ack_p50": "< 300 ms", "scale.*": "other"}
    assert bench_summary.target_for("scale.n3.delta.change_to_ack_p50", targets) == "< 300 ms"
    assert bench_summary.target_for("scale.n3.delta.cp_rss", targets) == "other"
    assert bench_summary.target_for("fanout.x", targets) == ""
    results = [
        Result("retention.peak_rss", 63.0, "MiB", {"services": 200, "budgets": "unbounded"}),
        Result("retention.peak_rss", 49.0, "MiB", {"services": 200, "budgets": "tight"}),
    ]
    text = bench_summary.summary_table(
        [
            bench_summary.Ran("retention", results, 2.0, "", {"*.peak_rss": "bounded"}),
            bench_summary.Ran("routes", [], 1.0, "RuntimeError: no HAProxy"),
        ],
        "quick",
    )
    lines = text.splitlines()
    assert lines[0].startswith("quick run;")
    rows = [line.split() for line in lines[3:5]]
    assert [r[:5] for r in rows] == [
        ["retention", "peak_rss", "63.00", "MiB", "bounded"],
        ["retention", "peak_rss", "49.00", "MiB", "bounded"],
    ]
    assert rows[0][5] == "budgets=unbounded" and rows[1][5] == "budgets=tight"
    assert lines[5].split()[:2] == ["routes", "FAILED"] and "no HAProxy" in lines[5]
    assert lines[-1] == "wall time: 3 s (retention 2 s, routes 1 s)"


def test_summary_table_shows_the_before_run_beside_this_one() -> None:
    now = [
        Result("route_table.route_change", 4.0, "ms", {"routes": 300}),
        Result("route_table.bytes", 900.0, "B", {"routes": 300}),
    ]
    before = bench_before.Before(
        "abc1234",
        results=[
            Result("route_table.route_change", 40.0, "ms", {"routes": 300}),
            Result("route_table.route_change", 41.0, "ms", {"routes": 301}),
        ],
    )
    ran = bench_summary.Ran("route_table", now, 2.0, "", {"*.route_change": "< 30 ms"})
    lines = bench_summary.summary_table([ran], "quick", before).splitlines()
    assert lines[1].split()[:5] == ["benchmark", "figure", "before", "(abc1234)", "after"]
    rows = [line.split() for line in lines[3:6]]
    # Matched by name and parameters; a figure the before run lacks shows "-"; one only
    # the before run has follows, with "-" after.
    assert rows[0][:6] == ["route_table", "route_change", "40.00", "4.00", "ms", "<"]
    assert rows[1][:5] == ["route_table", "bytes", "-", "900", "B"]
    assert rows[2][:5] == ["route_table", "route_change", "41.00", "-", "ms"]
    # Parameters also carry measured values (idle CPU): the name and most parameters match.
    measured = [Result("route_table.cpu", 3.0, "ms", {"routes": 300, "idle_ms": 4.2})]
    earlier = bench_before.Before(
        "abc1234", results=[Result("route_table.cpu", 9.0, "ms", {"routes": 300, "idle_ms": 5.1})]
    )
    ran_cpu = bench_summary.Ran("route_table", measured, 1.0)
    row = bench_summary.summary_table([ran_cpu], "quick", earlier).splitlines()[3].split()
    assert row[:5] == ["route_table", "cpu", "9.00", "3.00", "ms"]
    failed = bench_before.Before("nope", error="no revision 'nope' here")
    text = bench_summary.summary_table([ran], "quick", failed)
    assert "no revision 'nope' here" in text


def test_the_before_run_takes_its_revision_from_the_flag_or_the_environment() -> None:
    assert bench_before.wanted(None, {}) is None
    assert bench_before.wanted(None, {"BENCH_BEFORE": "none"}) is None
    assert bench_before.wanted(None, {"BENCH_BEFORE": "v1"}) == "v1"
    assert bench_before.wanted("v2", {"BENCH_BEFORE": "v1"}) == "v2"
    assert bench_before.compared(["compute", "route_table", "scale"]) == ["route_table", "scale"]
    missing = bench_before.run("no-such-revision-here", ["route_table"], full=False)
    assert missing.error.startswith("no revision 'no-such-revision-here' here")


def test_the_before_run_imports_the_code_of_its_revision_not_this_checkout(
    tmp_path: Path,
) -> None:
    commit = bench_before.resolve("HEAD")
    bench_before.unpack(commit, tmp_path)
    tree = tmp_path / "tree"
    assert (tree / "tests" / "bench" / "__main__.py").is_file()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import controlplane, nodeagent, peerplane, tests.bench;"
            "print(controlplane.__file__, nodeagent.__file__, peerplane.__file__)",
        ],
        cwd=tmp_path,  # not the tree: only the path given makes it win
        env=bench_before._environ(tree),
        check=True,
        capture_output=True,
        text=True,
    )
    files = done.stdout.split()
    assert len(files) == 3 and all(f.startswith(str(tree)) for f in files), files


def _by_name(results: list[Result]) -> dict[str, Result]:
    return {r.name: r for r in results}


@pytest.mark.haproxy
def test_haproxy_bench_drives_the_real_applier_without_failed_requests(
    haproxy_bin: HAProxyBinary,
) -> None:
    # Own octet (not the benchmark's) so a concurrent `make bench` never collides.
    found = _by_name(
        haproxy_bench.run(
            runtime_changes=3,
            reload_changes=1,
            octet=52,
            sync_wait=0.5,
            binary=haproxy_bin.path,
        )
    )
    runtime, reload = (
        found["haproxy.runtime.failed_requests"],
        found["haproxy.reload.failed_requests"],
    )
    assert runtime.value == 0 and reload.value == 0
    assert runtime.parameters["requests_ok"] > 0 and reload.parameters["requests_ok"] > 0
    # A slot address change never reloads; a settings change reloads once per change.
    assert runtime.parameters["reloads"] == 0
    assert reload.parameters["reloads"] == 1
    assert found["haproxy.runtime.pinned_entries_kept"].value == 1.0
    assert found["haproxy.reload.validate_p50"].value > 0
    assert "haproxy.reload_over_runtime" in found


@pytest.mark.haproxy
def test_e2e_bench_runs_the_real_fleet_and_address_changes_never_reload(
    haproxy_bin: HAProxyBinary,
) -> None:
    found = _by_name(
        e2e_bench.run(
            samples=2, reload_samples=1, octet=53, reload_gap=0.5, binary=haproxy_bin.path
        )
    )
    assert found["e2e.manifest_to_last_ack_p50"].parameters["reloads"] == 0
    assert found["e2e.manifest_to_last_ack_p50"].parameters["agents"] == 2
    assert "e2e.reload.manifest_to_last_ack_p50" in found


@pytest.mark.haproxy
def test_persistence_bench_design_moves_no_client_and_resort_does(
    haproxy_bin: HAProxyBinary,
) -> None:
    found = persistence_bench.run_version(
        haproxy_bin.path, haproxy_bin.version, clients=60, events=12, seed=3, octet=54
    )
    design, resort = (
        f"persistence.haproxy{haproxy_bin.version}.{a}.moved_clients"
        for a in persistence_bench.APPROACHES
    )
    by_name = _by_name(found)
    assert by_name[design].value == 0
    assert by_name[resort].value > 0
    for result in found:
        assert result.parameters["model_errors"] == 0
        assert result.parameters["requests"] >= 60


# ------------------------------------------------ scale and fan-out: full vs delta


def _snapshot_of(state: ClusterState, version: int) -> pb.Snapshot:
    result = compute(state, {})
    return next(iter(encode(result.workloads).values())).message(version=version)


def _delta_between(old: pb.Snapshot, new: pb.Snapshot) -> pb.SnapshotDelta:
    """A delta built by hand from the proto's rules (independent of the server's code)."""
    before = {b.name: b.SerializeToString(deterministic=True) for b in old.backends}
    delta = pb.SnapshotDelta(
        workload=new.workload,
        version=new.version,
        to_content_hash=new.content_hash,
        from_content_hash=old.content_hash,
        removed_backends=sorted(set(before) - {b.name for b in new.backends}),
        backends=[
            b for b in new.backends if before.get(b.name) != b.SerializeToString(deterministic=True)
        ],
        peers_changed=True,
        frontends_changed=True,
    )
    delta.peers.CopyFrom(new.peers)
    if new.HasField("http_frontend"):
        delta.http_frontend.CopyFrom(new.http_frontend)
    return delta


def test_bench_agents_materialize_a_delta_to_its_content_hash_and_catch_a_bad_one() -> None:
    old_state = big_cluster(4)
    # One endpoint moved in the first Service, the last Service removed: a changed and a
    # removed backend, a changed HTTP frontend (one host fewer).
    first = old_state.endpoint_slices[0]
    moved = dataclasses.replace(first.endpoints[0], addresses=("127.99.0.1",))
    new_state = dataclasses.replace(
        old_state,
        services=old_state.services[:-1],
        endpoint_slices=(
            dataclasses.replace(first, endpoints=(moved, *first.endpoints[1:])),
            *old_state.endpoint_slices[1:-1],
        ),
    )
    old, new = _snapshot_of(old_state, 1), _snapshot_of(new_state, 2)
    delta = _delta_between(old, new)
    assert len(delta.backends) == 1 and len(delta.removed_backends) == 1

    result = bench_deltas.apply_delta(old, delta)
    assert bench_deltas.verify(result)
    assert result.SerializeToString(deterministic=True) == new.SerializeToString(deterministic=True)

    corrupted = pb.SnapshotDelta()
    corrupted.CopyFrom(delta)
    corrupted.backends[0].slots[0].address = "127.99.0.2"
    assert not bench_deltas.verify(bench_deltas.apply_delta(old, corrupted))
    with pytest.raises(bench_deltas.DeltaError):
        bench_deltas.apply_delta(new, delta)  # not the base it was built from


def test_bench_agents_read_a_snapshot_envelope_as_protobuf_parses_it() -> None:
    snapshot = _snapshot_of(big_cluster(2), 7)
    raw = pb.ServerMessage(nonce="n-1", snapshot=snapshot).SerializeToString()
    envelope = bench_deltas.snapshot_envelope(raw)
    assert envelope is not None
    assert (envelope.nonce, envelope.version, envelope.content_hash) == (
        "n-1",
        7,
        snapshot.content_hash,
    )
    assert pb.Snapshot.FromString(envelope.snapshot) == snapshot
    assert (
        bench_deltas.snapshot_envelope(pb.ServerMessage(in_sync=pb.InSync()).SerializeToString())
        is None
    )


def test_fanout_compare_streams_deltas_that_every_worker_verifies() -> None:
    found = _by_name(fanout_bench.compare(agents=6, services=5, versions={"full": 2, "delta": 2}))
    full = found["fanout.s5.full.bytes_per_stream_per_version"]
    delta = found["fanout.s5.delta.bytes_per_stream_per_version"]
    assert full.parameters["snapshots_received"] == 12
    assert full.parameters["deltas_received"] == 0
    assert delta.parameters["deltas_received"] == 12
    assert delta.parameters["snapshots_received"] == 0
    # Each version's delta materialized from the held base and its hash checked.
    assert delta.parameters["verified_per_worker"] >= 2
    assert delta.value < full.value


def test_pod_network_prefix_is_local_inside_and_unrouted_after_close() -> None:
    """The real-API-server benchmarks' endpoints: one routed prefix, local in the
    namespace. A server bound there to one address answers from the host; another address
    of the prefix is refused inside (never sent on); after `close` nothing is routed."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("root and iproute2 only (a network namespace)")
    network = PodNetwork(
        f"ppbt{os.getpid()}",
        [],
        host_side="10.254.243.1",
        pod_side="10.254.243.2",
        prefixes=["10.97.0.0/16"],
    )
    try:
        with network.inside():
            server = http.server.ThreadingHTTPServer(
                ("10.97.3.4", 0), http.server.SimpleHTTPRequestHandler
            )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"http://10.97.3.4:{server.server_address[1]}/"
            with urllib.request.urlopen(url, timeout=5) as reply:
                assert reply.status == 200
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("10.97.200.9", 8888), timeout=5)
        finally:
            server.shutdown()
            server.server_close()
    finally:
        network.close()
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    assert "10.97.0.0/16" not in routes


def test_kube_real_variants_are_left_out_with_a_line_when_not_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert realapi.unavailable().startswith("not root")
    assert scale_bench.run(sizes=(3,), binary="/bin/false", modes=("kube-real",)) == []
    assert "scale: kube-real (a real API server) skipped: not root" in capsys.readouterr().out
    assert routes_bench.run(binary="/bin/false", variants=["kube-real"]) == []
    assert "route_propagation kube-real (a real API server) skipped: not root" in (
        capsys.readouterr().err
    )


@pytest.mark.realkube
def test_scale_bench_kube_real_runs_against_a_real_api_server_under_the_shipped_rbac() -> None:
    """kube-real: a cluster of its own (tests/cluster/up, deploy/ installed), `serve` with
    the shipped ServiceAccount's token, the endpoints in the run's network namespace (a
    real EndpointSlice refuses loopback ones): the endpoint moves reach both agents as
    runtime changes, the leader wrote a shard per backend, no call was refused. About 45 s
    here (half of it the cluster's start); root only."""
    why = realapi.unavailable()
    if why:
        pytest.skip(why)
    found = _by_name(
        scale_bench.run(
            sizes=(3,),
            samples=2,
            octet=57,
            modes=("kube-real",),
            calibrate_s=0.2,
            checks_off=(),
        )
    )
    assert not [name for name in found if name.endswith(".failed")], found
    change = found["scale.n3.kube-real.change_to_ack_p50"]
    assert change.parameters["reloads"] == 0 and change.parameters["agents_on_deltas"] == 2
    assert 0 < change.value < 30_000
    assert found["scale.n3.kube-real.api_load"].value > 0
    ledger = found["scale.n3.kube-real.ledger_largest_object"]
    assert ledger.value > 0 and ledger.parameters["note"].startswith("3 shards")
    note = found["scale.n3.kube-real.startup_first_ack"].parameters["note"]
    assert "startup wrote 3 shards" in note and "; 0 calls refused by the shipped RBAC" in note
    assert "scale.n3.kube-real.api_written_per_change" not in found  # not metered


@pytest.mark.haproxy
def test_scale_bench_measures_delivery_and_ledger_modes_side_by_side(
    haproxy_bin: HAProxyBinary,
) -> None:
    """Full snapshots vs deltas on every HAProxy version; the ledger modes (no state,
    SQLite `--state`, the Kubernetes ConfigMap shards against the fake API server) change
    only the control plane, so they run with the HAProxy on PATH alone."""
    ledger_modes = os.path.realpath(haproxy_bin.path) == os.path.realpath(haproxy_binary() or "")
    modes = ("full", "delta", *(("state", "kube") if ledger_modes else ()))
    found = _by_name(
        scale_bench.run(
            sizes=(3,),
            samples=2,
            octet=55,
            binary=haproxy_bin.path,
            modes=modes,
            calibrate_s=0.5,
            checks_off=("delta",) if ledger_modes else (),
        )
    )
    assert not [name for name in found if name.endswith(".failed")]
    full = found["scale.n3.full.change_to_ack_p50"].parameters
    delta = found["scale.n3.delta.change_to_ack_p50"].parameters
    # The endpoint move stays a runtime-API change in both modes.
    assert full["reloads"] == 0 and delta["reloads"] == 0
    assert full["agents_on_deltas"] == 0 and delta["agents_on_deltas"] == 2
    sent_full = found["scale.n3.full.bytes_per_agent_per_change"]
    sent_delta = found["scale.n3.delta.bytes_per_agent_per_change"]
    assert not sent_full.parameters["sent_by_kind_total"].get("delta")
    assert sent_delta.parameters["sent_by_kind_total"]["delta"] > 0
    assert sent_delta.value < sent_full.value
    assert found["scale.n3.delta.startup_first_ack"].value > 0
    for mode in modes:  # resident memory of real processes, in MiB
        for process in ("cp", "agent"):
            now = found[f"scale.n3.{mode}.{process}_rss"].value
            assert 10 < now <= found[f"scale.n3.{mode}.{process}_rss_peak"].value < 2048
        agents = [n for n in found if n.startswith(f"scale.n3.{mode}.agent_rss.")]
        assert len(agents) == 2 and all(10 < found[n].value < 2048 for n in agents)
        for process in ("master", "worker"):
            assert 1 < found[f"scale.n3.{mode}.haproxy_{process}_rss"].value < 2048
        assert found[f"scale.n3.{mode}.disk_written_per_change"].value >= 0
    assert "scale.n3.delta.ledger_largest_object" not in found  # nothing persisted
    for mode in modes:  # the default settings: health checks on
        assert found[f"scale.n3.{mode}.change_to_ack_p50"].parameters["health_checks"] is True
    if not ledger_modes:
        return
    # Checks off beside checks on, and their ratios.
    off = found["scale.n3.delta-nochecks.change_to_ack_p50"]
    assert off.parameters["health_checks"] is False and off.parameters["reloads"] == 0
    ratio = found["scale.n3.delta.checks_on_over_off.p50"]
    assert ratio.value == pytest.approx(ratio.parameters["on"] / ratio.parameters["off"], rel=0.01)
    assert "scale.n3.state-nochecks.change_to_ack_p50" not in found
    for mode in ("state", "kube"):
        assert found[f"scale.n3.{mode}.change_to_ack_p50"].parameters["reloads"] == 0
        assert found[f"scale.n3.{mode}.change_to_ack_p50"].parameters["agents_on_deltas"] == 2
    # SQLite: one row per backend, written to disk on each change.
    state = found["scale.n3.state.ledger_largest_object"]
    assert state.value > 0 and state.parameters["note"].startswith("3 rows")
    assert found["scale.n3.state.disk_written_per_change"].value > 0
    # Kubernetes: one shard per backend, created at start; a change rewrites one shard.
    kube = found["scale.n3.kube.ledger_largest_object"]
    assert 0 < kube.value < 64 * 1024 and kube.parameters["note"].startswith("3 shards")
    written = found["scale.n3.kube.api_written_per_change"]
    assert 0 < written.value < 16 * 1024
    assert written.parameters["received_by_collection_total"]["configmaps"] > 0
    assert "startup wrote 3 shards" in found["scale.n3.kube.startup_first_ack"].parameters["note"]
    assert "scale.n3.state.api_written_per_change" not in found


@pytest.mark.haproxy
def test_scale_bench_reports_a_config_refused_for_descriptors_as_a_row(
    haproxy_bin: HAProxyBinary,
) -> None:
    """Checks on need a descriptor per slot: under an open-files limit of 8,450 (the
    agents'), 10 Services x 42 checked slots need more (2 x maxconn 4,096 + 420 + the
    rest), without checks less. The refused config is a row with the agent's words; the
    other mode skips checks on and runs with checks off; nothing raises."""
    found = _by_name(
        scale_bench.run(
            sizes=(10,),
            samples=1,
            octet=56,
            binary=haproxy_bin.path,
            modes=("delta", "state"),
            calibrate_s=0.2,
            checks_off=(),
            nofile=8450,
        )
    )
    refused = found["scale.n10.delta.refused"]
    assert "open files" in refused.parameters["haproxy_said"]
    assert "420 servers with health checks" in refused.parameters["haproxy_said"]
    needed = found["scale.n10.delta.fd_needed"]
    assert needed.value > 8450 == needed.parameters["fd_limit"]
    assert not [n for n in found if n.startswith("scale.n10.state.")]  # skipped
    for mode in ("delta", "state"):  # every mode runs with checks off at that N
        off = found[f"scale.n10.{mode}-nochecks.change_to_ack_p50"]
        assert off.parameters["health_checks"] is False and off.parameters["samples"] == 1
    assert not [n for n in found if n.endswith(".failed")]


def test_scale_bench_reads_the_refusal_words_of_the_agent_and_of_haproxy() -> None:
    nack = (
        "HAProxy would need 20,839 open files for this config but the limit is 20,000: "
        "2 per connection of maxconn 4,096 = 8,192, + 12,600 servers with health checks"
    )
    refused = scale_bench.HAProxyRefused("haproxy-system/a", nack)
    assert (refused.needed, refused.limit) == (20_839, 20_000)
    log = (
        "INFO started haproxy master pid=7\n"
        "[ALERT]    (7) : [haproxy.main()] Cannot raise FD limit to 11220, limit is 4000.\n"
    )
    words = scale_bench.refusal(log)
    assert words.startswith("[ALERT]    (7) : [haproxy.main()]")
    assert words.endswith("Cannot raise FD limit to 11220, limit is 4000")
    assert scale_bench.HAProxyRefused("a", words).needed == 11_220
    assert scale_bench.refusal("INFO serving\n") == ""


def test_scale_cluster_objects_are_the_folder_manifests() -> None:
    """The kube mode's API objects are the files mode's manifests, object for object."""
    pods = (("haproxy-a", "127.9.1.1"), ("haproxy-b", "127.9.1.2"))
    for index in (0, 7):
        assert list(yaml.safe_load_all(scalefolder.service_file(index))) == list(
            scalefolder.service_objects(index)
        )
    documents = list(yaml.safe_load_all(scalefolder.haproxy_file(pods)))
    assert [d for d in documents if d["kind"] == "Pod"] == scalefolder.haproxy_pod_objects(pods)
    for checks in (True, False):
        assert yaml.safe_load(scalefolder.settings_file(1, 2, checks)) == (
            scalefolder.settings_object(1, 2, checks)
        )
    objects = list(scalefolder.cluster_objects(3, pods, 1, 2))
    assert len(objects) == 1 + len(pods) + 3 * 2
    assert objects[0]["data"]["check"] == "true"  # 3 Services: health checks on


def test_failover_bench_check_fails_loudly_on_a_lost_follower_stream_or_a_moved_slot() -> None:
    failover_bench.check([[], []], {"127.0.3.1": {1}}, {"127.0.3.1": 1}, {"127.0.3.1": 1})
    with pytest.raises(failover_bench.FailoverError, match="lost their stream"):
        failover_bench.check([[], [(1.0, "UNAVAILABLE")]], {}, {}, {})
    with pytest.raises(failover_bench.FailoverError, match="slots moved"):
        failover_bench.check([[]], {"127.0.3.1": {1, 2}}, {}, {})
    with pytest.raises(failover_bench.FailoverError, match="slots moved"):
        failover_bench.check([[]], {}, {"127.0.3.1": 1}, {"127.0.3.1": 2})


def test_failover_bench_keeps_follower_streams_while_leader_agents_reconnect() -> None:
    # A short Lease (the bench itself uses the default 15 s); one SIGKILLed leader.
    figures = failover_bench.measure(rounds=1, lease_s=2.0)
    assert figures.losses["followers"] == 0
    assert figures.agents["followers"] == 2 * figures.agents["leader"] > 0
    assert figures.losses["leader"] == figures.agents["leader"]
    assert figures.losses["single"] == figures.agents["single"]
    for group in failover_bench.GROUPS:
        assert len(figures.removal[group]) == len(figures.addition[group]) == figures.agents[group]
    assert len(figures.reconnect["leader"]) == figures.agents["leader"]
    assert figures.reconnect["followers"] == []
    assert len(figures.takeover) == 1 and figures.takeover[0] > 0


def test_retention_bench_bounds_what_the_unbounded_store_lets_grow() -> None:
    """The retention benchmark's workload (8 workloads, 17 settings edits, 120 agents on
    as many bases) at 200 Services: unbounded, bases and deltas exceed the budgets the
    bounded store keeps to, and every agent gets either a delta or the snapshot."""
    budgets = (2 * 2**20, 2**20)
    unbounded = retention_bench.child(200, 0, 0, traced=False)
    bounded = retention_bench.child(200, *budgets, traced=False)
    assert unbounded["agents_retained_bytes"] > budgets[0]
    assert unbounded["agents_delta_cache_bytes"] > budgets[1]
    assert bounded["agents_retained_bytes"] <= budgets[0]
    assert bounded["agents_delta_cache_bytes"] <= budgets[1]
    for figures in (unbounded, bounded):
        assert figures["deltas"] + figures["snapshots"] == 120
    assert unbounded["snapshots"] == 0 < bounded["snapshots"]


def test_tls_bench_rotates_through_the_runtime_api_without_a_failed_request(
    haproxy_bin: HAProxyBinary,
) -> None:
    # Own octet (not the benchmark's) so a concurrent `make bench` never collides.
    sizes = {"handshake_s": 1, "requests": 50, "rotations": 2}
    found = _by_name(tls_bench.run(octet=59, binary=haproxy_bin.path, sizes=sizes))
    assert found["tls.handshakes_per_s"].value > 0 and found["tls.requests_per_s"].value > 0
    assert found["tls.requests_per_s_backend"].value > 0
    assert found["tls.requests_failed"].value == 0
    rotation = found["tls.rotation_p99"]
    assert rotation.parameters == {"rotations": 2, "applied_by": ["runtime"]}
    assert found["tls.rotation_reloads"].value == 0


def test_tls_rotation_bench_renews_the_secret_file_through_both_instances_without_a_reload(
    haproxy_bin: HAProxyBinary,
) -> None:
    # Own octet (not the benchmark's) so a concurrent `make bench` never collides.
    found = _by_name(tls_rotation_bench.run(octet=69, binary=haproxy_bin.path, rotations=2))
    assert found["tls_rotation.latency_p99"].parameters["rotations"] == 2
    assert found["tls_rotation.latency_p99"].value >= found["tls_rotation.latency_p50"].value > 0
    assert found["tls_rotation.reloads"].value == 0
    assert found["tls_rotation.failed_requests"].value == 0
    assert found["tls_rotation.failed_requests"].parameters["requests"] > 0


def test_route_cluster_objects_are_the_fleet_manifests_but_the_daemonset(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, 50)
    fleet.write_manifests()
    objects = list(routeskube.folder_objects(fleet.manifests))
    kinds = [obj["kind"] for obj in objects]
    assert "DaemonSet" not in kinds
    assert {"Service", "EndpointSlice", "Pod", "ConfigMap", "Gateway", "HTTPRoute"} <= set(kinds)
    pods = {o["metadata"]["name"]: o["status"]["podIP"] for o in objects if o["kind"] == "Pod"}
    assert pods == {name: fleet.ip(address) for name, address in HAPROXY_PODS}


def test_route_propagation_publish_lag_is_each_write_to_the_next_publication() -> None:
    assert routes_bench.publish_lags([10.0, 20.0, 30.0], [9.0, 10.0004, 20.05]) == pytest.approx(
        [0.0004, 0.05]
    )
    assert routes_bench.publish_lags([10.0], [9.9995]) == [0.0]  # log times are cut to ms


def test_route_propagation_after_publish_is_each_trial_from_its_publication_to_its_200() -> None:
    """The agents' share: write + first 200 - the first publication at or after the
    write; a trial never published is left out."""
    shares = routes_bench.after_publish([10.0, 20.0, 30.0], [0.05, 0.03, 0.02], [10.02, 20.025])
    assert shares == pytest.approx([0.03, 0.005])


def test_route_propagation_bench_kube_variant_creates_routes_through_the_api_without_a_reload(
    haproxy_bin: HAProxyBinary,
) -> None:
    """The Kubernetes variant at a tiny size (the folder variant runs the same trials and
    loop, only its writes differ): routes POSTed and PUT to the fake API server reach
    both HAProxies, at runtime."""
    # Own octets (not the benchmark's) so a concurrent `make bench` never collides.
    found = _by_name(
        routes_bench.run(octet=49, binary=haproxy_bin.path, sizes=(20, 2, 2), variants=["kube"])
    )
    assert not [name for name in found if not name.startswith("route_propagation.kube.")]
    first = found["route_propagation.kube.new_route_first_200_p50"]
    assert first.parameters["routes"] == 20 and first.value > 0
    assert found["route_propagation.kube.new_route_published_p50"].value >= 0
    assert found["route_propagation.kube.new_route_published_to_200_p50"].value >= 0
    assert found["route_propagation.kube.reloads"].value == 0
    assert found["route_propagation.kube.repoint_failed_requests"].value == 0
    assert found["route_propagation.kube.repoint_failed_requests"].parameters["requests"] > 0
    assert found["route_propagation.kube.repoint_reloads"].value == 0
    rss = {n for n in found if ".cp_rss" in n or ".agent_rss." in n}
    assert rss == {
        "route_propagation.kube.cp_rss",
        *(f"route_propagation.kube.agent_rss.{pod}" for pod, _ in HAPROXY_PODS),
    }
    assert all(found[n].value > 10 for n in rss)  # MiB: a Python process at least


def test_soak_bench_samples_memory_under_a_stream_of_changes(haproxy_bin: HAProxyBinary) -> None:
    """A tiny soak (own octet): the warm-up turn and the stream of endpoint and route
    changes run, both agents converge at the end, the RSS of the control plane and of each
    agent is sampled, the trend starts after the warm-up, and a run this short reports its
    slope without a verdict."""
    # 6 s measured (75 changes, an RSS sample every 0.4 s): the harness's behaviour, not a
    # trend; 15 s at 0.2 s and 1 s said nothing more and cost 9 s per HAProxy version.
    size = soak_bench.SoakSize(services=3, routes=4, minutes=0.1, interval_s=0.08, sample_s=0.4)
    found = soak_bench.soak(size, haproxy_bin.path, octet=45)
    assert found.converged and found.changes == 75 and found.checks
    assert found.measured_from is not None and found.warm_up_s > 0
    assert set(found.trends) == {"controlplane", "haproxy-s45a", "haproxy-s45b"}
    for name, trend in found.trends.items():
        assert trend.samples >= 10 and trend.start > 10 and not trend.judged
        warm = [v for t, v in found.series[name] if t < found.measured_from]
        assert warm and trend.seconds <= found.series[name][-1][0] - found.measured_from
    names = {r.name for r in soak_bench.results(found)}
    assert {"soak.converged", "soak.cp.rss_slope", "soak.agent.haproxy-s45a.rss_end"} <= names
    assert not [n for n in names if n.endswith("rss_flat")]
    assert len(soak_bench.series_lines(found)) == 3  # one line of RSS points a process


def test_route_propagation_bench_folder_variant_serves_new_services_from_spares(
    haproxy_bin: HAProxyBinary,
) -> None:
    """The folder variant at a tiny size: new Services with their first route reach both
    HAProxies without a reload while spares last, and with one reload per agent each once
    the pool is off (docs/design.md, "Spare backends")."""
    found = _by_name(
        routes_bench.run(octet=46, binary=haproxy_bin.path, sizes=(20, 2, 1), variants=["folder"])
    )
    assert found["route_propagation.new_service_spares_reloads"].value == 0
    assert found["route_propagation.new_service_no_spares_reloads"].value == 2 * 2
    assert found["route_propagation.new_service_spares_first_200_p50"].value > 0
    assert found["route_propagation.reloads"].value == 0


@pytest.mark.realkube
def test_api_servers_bench_measures_the_fake_and_a_real_api_server_side_by_side() -> None:
    """Both variants write the same cluster, the leader writes a shard per backend, and
    every endpoint move reaches both agents (behaviour only; figures are the bench's). Its real
    variant starts a cluster (tests/cluster/up): `realkube`, like the other real-API tests."""
    results = {r.name: r.value for r in apiservers_bench.run(sizes=(4, 2))}
    for kind in ("fake", "real"):
        assert results[f"api_servers.{kind}.shards"] == 4
        assert results[f"api_servers.{kind}.first_ack_s"] > 0
        assert results[f"api_servers.{kind}.endpoint_change_ack_p99_ms"] > 0


def test_route_delta_bench_sends_a_route_change_as_its_group_and_applies_it_at_runtime(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One HTTPRoute's path changed among 300: a delta of a few hundred bytes (the
    route's group, not the listener), applied by the agent through map updates."""
    found = {r.name: r for r in route_delta_bench._one(300)}
    assert 0 < found["route_change_delta_bytes_300"].value < 1024
    assert found["route_change_agent_apply_300"].value > 0
    assert "(runtime: 2 route map entries changed)" in capsys.readouterr().err


def test_route_profile_times_each_stage_of_a_new_route_and_puts_the_functions_back() -> None:
    """The profile of one new HTTPRoute among 300: every stage measured in each trial,
    the content hash on both sides, and the functions it wrapped are the originals again
    (it runs beside other tests in one process)."""
    before = parts.ContentParts.content_hash
    rows = route_profile_bench.profile(300, 3)
    assert parts.ContentParts.content_hash is before
    for stage in ("compute", "encode", "  content hash", "agent: applied and verified"):
        assert len(rows[stage]) == 3, stage
    assert all(value > 0 for value in rows["compute"])
    assert all(value > 0 for value in rows["  the content hash verified"])


def test_a_percentile_is_the_nearest_rank() -> None:
    """ceil(q/100 * n)-th in order: of 100 values the p99 is the 99th, not the largest
    (round half to even made it the 100th, and the median of 10 the 6th)."""
    hundred = [float(v) for v in range(100, 0, -1)]
    assert percentile(hundred, 99) == 99
    assert percentile(hundred, 50) == 50
    assert percentile(hundred, 100) == 100
    assert percentile([float(v) for v in range(1, 201)], 99) == 198
    assert percentile([float(v) for v in range(1, 21)], 99) == 20
    assert percentile([float(v) for v in range(1, 21)], 90) == 18
    assert percentile([float(v) for v in range(1, 11)], 50) == 5
    assert percentile([7.0], 99) == 7
    assert percentile([1.0, 2.0], 0) == 1
