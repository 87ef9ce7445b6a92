"""Churn under load: 1,000 agent streams on one `controlplane serve --source kubernetes
--leader-elect` (the slot ledger in ConfigMap shards, as deployed) while the fake API
server changes the shop EndpointSlice 50 times a second for 60 s (`--quick`: 100 streams,
5 s).

Counted: streams lost (ended without the agent asking), agents on the final version and
how long after the last change they all were, the control plane's RSS idle, with the
streams connected, after the churn and 2 s later. The same harness runs scaled down in
tests/system/test_faults_load.py.
"""

from __future__ import annotations

from typing import Any

from tests.bench.common import Result, log
from tests.helpers.churn import NS, run_load

# As deploy/base/controlplane.yaml runs it: the Lease holder keeps the slot ledger in
# ConfigMap shards of the (fake) API server.
DEPLOYED = ("--leader-elect", f"--lease-namespace={NS}", f"--slots-configmap={NS}/peerplane-slots")
# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {
    "churn.streams_lost": "0",
    "churn.agents_on_final_version": "every stream",
    "churn.rss_growth_second_half": "flat (~0)",
}


def run(quick: bool = False, agents: int | None = None) -> list[Result]:
    agents = agents or (100 if quick else 1000)
    seconds, rate = (5.0, 50.0) if quick else (60.0, 50.0)
    figures = run_load(agents, seconds, rate, server_args=DEPLOYED)
    log(f"churn: {figures.to_json()}")
    params: dict[str, Any] = {
        "streams": agents,
        "seconds": seconds,
        "changes_per_s": rate,
        "ledger": "kube",
        "changes": figures.changes,
        "final_version": figures.final_version,
    }
    return [
        Result("churn.streams_lost", figures.streams_lost, "streams", params),
        Result("churn.agents_on_final_version", figures.agents_on_final, "agents", params),
        Result("churn.last_change_to_all_converged", figures.converge_s, "s", params),
        Result("churn.rss_idle", figures.rss_mib_idle, "MiB", params),
        Result("churn.rss_connected", figures.rss_mib_connected, "MiB", params),
        Result("churn.rss_half_churn", figures.rss_mib_half_churn, "MiB", params),
        Result("churn.rss_after_churn", figures.rss_mib_after_churn, "MiB", params),
        Result(
            "churn.rss_growth_second_half",
            figures.rss_mib_after_churn - figures.rss_mib_half_churn,
            "MiB",
            params,
        ),
        Result("churn.rss_settled", figures.rss_mib_settled, "MiB", params),
        Result(
            "churn.rss_growth_over_run",
            figures.rss_mib_settled - figures.rss_mib_connected,
            "MiB",
            params,
        ),
    ]


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["churn"]))
