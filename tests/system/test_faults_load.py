"""Load: agent streams on a real control plane while the fake API server churns
endpoints; no stream lost, every agent on the final version, the model equal to the API
server's final state, RSS flat. `make test` runs 200 streams x 10 s at 50 changes/s;
PEERPLANE_LOAD_AGENTS / PEERPLANE_LOAD_SECONDS scale it, `make bench` (churn) runs
1,000 x 60 s."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers.churn import run_load

AGENTS = int(os.environ.get("PEERPLANE_LOAD_AGENTS", "200"))
SECONDS = float(os.environ.get("PEERPLANE_LOAD_SECONDS", "10"))
RATE = 50.0
LEAK_BUDGET_MIB = 64  # a guard against unbounded growth, not a performance figure


def test_agents_survive_endpoint_churn_and_converge(tmp_path: Path) -> None:
    figures = run_load(AGENTS, SECONDS, RATE, tmp_path)
    print(json.dumps(figures.to_json(), indent=2))
    assert figures.changes >= SECONDS * RATE * 0.5
    assert figures.streams_lost == 0 and figures.streams_opened == AGENTS
    assert figures.agents_on_final == AGENTS
    assert figures.final_version > 2  # published during the churn, not only at the end
    assert figures.rss_mib_settled - figures.rss_mib_connected < LEAK_BUDGET_MIB
    assert figures.rss_mib_after_churn - figures.rss_mib_half_churn < LEAK_BUDGET_MIB / 4
