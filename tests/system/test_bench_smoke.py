"""Smoke tests of the benchmark harness: behaviour only, never a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import e2e as e2e_bench
from tests.bench import haproxy as haproxy_bench
from tests.bench import persistence as persistence_bench
from tests.bench import stability
from tests.bench.__main__ import main as bench_main
from tests.bench.common import Result
from tests.helpers.haproxy_versions import HAProxyBinary


def test_sticky_slots_never_move_a_surviving_pod_and_replicas_agree() -> None:
    figures = stability.simulate(clients=200, pods=20, events=60, seed=11)
    design = figures["design"]
    assert design["broken_clients"] == 0
    assert design["slot_moves"] == 0
    assert design["settled_mismatch"] == 0
    assert design["settled_mismatch_max"] == 0
    # The comparison is meaningful: re-sorting on every change does break sessions.
    assert figures["upstream-resort"]["broken_clients"] > 0


def test_quick_run_writes_results_json(tmp_path: Path) -> None:

    out = tmp_path / "results.json"
    assert bench_main(["compute", "stability", "--quick", "--results", str(out)]) == 0
    entries = json.loads(out.read_text())
    names = {entry["name"] for entry in entries}
    assert {"compute.full", "compute.one_change_total", "stability.design.broken_clients"} <= names
    for entry in entries:
        assert set(entry) == {"name", "value", "unit", "parameters", "machine"}
        assert isinstance(entry["value"], int | float)
        assert set(entry["machine"]) == {"cores", "python"}


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
