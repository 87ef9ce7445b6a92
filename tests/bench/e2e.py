"""End to end: a manifest change in the watched folder to the last of two agents ACKing.

Runs the real fleet through `tests.helpers.fleet.Fleet` (octet 40, so it never collides
with the tests or the demo): `controlplane serve --source files:DIR`, two `nodeagent run
--manage-haproxy` agents each with its own HAProxy on its own loopback address, and the
demo's backend pods. Each runtime-path sample rewrites the shop EndpointSlice atomically
with shop-2's address moved between two values (127.40.2.3 <-> 127.40.2.9, both served):
the moved endpoint keeps slot SRV_3, so each agent applies it with `set server`. Then it
polls ListAgents every 10 ms until both agents acknowledged a newer version. A few
reload-path samples change the settings ConfigMap's stick-table expire (30m <-> 31m)
instead. The figure includes noticing the change (a file-system notification, grouped for
50 ms; until the folder was watched by notification, a 0.2 s poll) and the debounce (0.1 s
of quiet); reloads seen by each HAProxy master are counted to check each sample's path.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from nodeagent.haproxy.driver import HAProxy
from tests.bench.common import Result, log, median, percentile
from tests.helpers.fleet import Fleet, haproxy_binary
from tests.helpers.waiting import wait_until

OCTET = 40
POLL_S = 0.01
POLL_INTERVAL_S = 0.2  # the files source's default, used only when polling is forced
DEBOUNCE_S = 0.1
# Reload samples wait out the agent's bounded peer-resync wait (5 s): one change after quiet.
RELOAD_GAP_S = 5.5
SHOP = "shop.yaml"
SETTINGS = "settings.yaml"


class Bench:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def versions(self) -> list[int]:
        return [agent.acked_version for agent in self.fleet.agents_status()]

    def reloads(self) -> int:
        """Reloads of every agent's HAProxy master so far (`show proc`, the agent's driver)."""
        return sum(
            HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc().reloads
            for agent in self.fleet.agents.values()
        )

    def change(self, name: str, old: str, new: str, timeout: float = 30) -> float:
        """Rewrite one manifest (atomic rename); seconds until every agent ACKed a newer
        version. Polls ListAgents only, so as not to load the control plane."""
        before = min(self.versions())
        path = self.fleet.manifests / name
        text = path.read_text()
        changed = text.replace(old, new)
        if changed == text:
            raise RuntimeError(f"{name}: {old!r} not found")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(changed)
        start = time.perf_counter()
        os.replace(tmp, path)
        wait_until(lambda: min(self.versions()) > before, timeout, "every agent's ACK", step=POLL_S)
        elapsed = time.perf_counter() - start
        self.fleet.wait_all_acked(timeout)  # and it is the current content, on both
        return elapsed


def run(
    quick: bool = False,
    samples: int = 0,
    reload_samples: int | None = None,
    octet: int = OCTET,
    reload_gap: float = RELOAD_GAP_S,
    binary: str | None = None,
) -> list[Result]:
    """The figures; the keyword arguments let the smoke test run a small, separate fleet
    (`binary`: the HAProxy, default the one on PATH)."""
    if binary is None and haproxy_binary() is None:
        raise RuntimeError("haproxy not found")
    samples = samples or (3 if quick else 20)
    if reload_samples is None:
        reload_samples = 1 if quick else 3
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    fleet = Fleet(work, octet, haproxy_bin=binary)
    runtime: list[float] = []
    reload: list[float] = []
    agents = 0
    try:
        fleet.start()
        addresses = [fleet.ip("127.0.2.3"), fleet.ip("127.0.2.9")]
        fleet.backends.start("shop-2-moved", addresses[1], 8888)
        bench = Bench(fleet)
        agents = len(fleet.agents)
        reloads_before = bench.reloads()
        for sample in range(samples):
            old, new = addresses[sample % 2], addresses[(sample + 1) % 2]
            runtime.append(bench.change(SHOP, f'"{old}"', f'"{new}"'))
            time.sleep(0.25)
        runtime_reloads = bench.reloads() - reloads_before
        expires = ["source-ip-persistence-expire: 30m", "source-ip-persistence-expire: 31m"]
        for sample in range(reload_samples):
            time.sleep(reload_gap)
            old, new = expires[sample % 2], expires[(sample + 1) % 2]
            before = bench.reloads()
            reload.append(bench.change(SETTINGS, old, new))
            if bench.reloads() - before != len(fleet.agents):
                raise RuntimeError("a settings change did not reload every HAProxy once")
        log(f"e2e: runtime p50 {median(runtime) * 1000:.0f} ms, reload {reload}")
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    params = {
        "samples": samples,
        "agents": agents,
        "agent": "nodeagent + HAProxy",
        "reloads": runtime_reloads,
        "poll_interval_s": POLL_INTERVAL_S,
        "debounce_s": DEBOUNCE_S,
    }
    reload_params = {**params, "samples": reload_samples, "reloads": reload_samples * agents}
    results = [
        Result("e2e.manifest_to_last_ack_p50", median(runtime) * 1000, "ms", params),
        Result("e2e.manifest_to_last_ack_p99", percentile(runtime, 99) * 1000, "ms", params),
    ]
    if reload:
        results += [
            Result(
                "e2e.reload.manifest_to_last_ack_p50", median(reload) * 1000, "ms", reload_params
            ),
            Result("e2e.reload.manifest_to_last_ack_max", max(reload) * 1000, "ms", reload_params),
        ]
    return results


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["e2e"]))
