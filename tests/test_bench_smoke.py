"""Smoke tests of the benchmark harness: behaviour only, never a time."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench import stability
from tests.bench.__main__ import main as bench_main


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
