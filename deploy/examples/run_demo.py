"""`make demo`: the whole system on one machine, on loopback.

A control plane on `deploy/examples/demo/` (a copy, so you can edit it while it runs),
two agents each supervising its own HAProxy on its pod's address (127.0.1.1, 127.0.1.2),
the demo backends (shop, catalog, db), then a failover run: a client from a fixed source
address pinned through HAProxy A keeps its backend pod through HAProxy B after A is lost.
Clients send nothing to an HAProxy before its agent's `/readyz` answers 200 (its stick
tables synced from the peers): traffic that arrives earlier may be pinned differently on
two instances, which is why a load balancer must health-check `/readyz` (docs/operations.md,
"Readiness where traffic is decided").
Runs until Ctrl-C (or `--once`), then stops everything it started.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.helpers.fleet import (  # noqa: E402
    HAPROXY_PODS,
    HTTP_PORT,
    TCP_PORT,
    WORKLOAD,
    AgentHandle,
    Fleet,
    haproxy_binary,
    http_get,
    table_entries,
    tcp_get,
    wait_for,
)

GRPCURL = str(Path(sys.executable).parent / "grpcurl")
CLIENT = "127.0.9.1"


def heading(text: str) -> None:
    print(f"\n=== {text}\n", flush=True)


def grpcurl(address: str, *args: str) -> str:
    done = subprocess.run(
        [GRPCURL, "-plaintext", *args[:-1], address, args[-1]],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return done.stdout if done.returncode == 0 else done.stderr


def ready(agent: AgentHandle, label: str) -> None:
    """What a load balancer does: no traffic to this HAProxy before its `/readyz` is 200."""
    print(f"waiting for HAProxy {label}'s {agent.readyz_url} ...", flush=True)
    print(f"HAProxy {label} ready: GET {agent.readyz_url} -> 200 {agent.wait_ready(60)}")


def failover(fleet: Fleet) -> bool:
    (name_a, address_a), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    ready(a, "A")
    ready(b, "B")
    pod = http_get(a.address, "shop.example.com", CLIENT)
    again = http_get(a.address, "shop.example.com", CLIENT)
    print(f"client {CLIENT} -> HAProxy A ({a.address}:{HTTP_PORT}) -> {pod}, and again -> {again}")

    def replicated() -> bool:
        return CLIENT in table_entries(b.runtime("show table default_shop_http"))

    wait_for(replicated, 10, "the stick-table entry to reach B")
    server = table_entries(b.runtime("show table default_shop_http"))[CLIENT]
    print(f"HAProxy B's stick table (runtime API `show table`): {CLIENT} -> {server}")
    print(f"stopping agent A and its HAProxy ({a.address}) ...")
    fleet.stop_agent(name_a)
    through_b = http_get(b.address, "shop.example.com", CLIENT)
    print(f"client {CLIENT} -> HAProxy B ({b.address}:{HTTP_PORT}) -> {through_b}")
    ok = through_b == pod
    print("the same backend pod answered: persistence survived" if ok else "MOVED: failure")
    print("restarting agent A ...")
    fleet.start_agent(name_a, address_a)
    fleet.wait_all_acked()
    ready(fleet.agents[name_a], "A")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--once", action="store_true", help="exit after the failover run")
    parser.add_argument("--workdir", type=Path, help="where logs, configs and state go")
    args = parser.parse_args()
    if haproxy_binary() is None:
        print("HAProxy is not installed: apt-get install haproxy (2.6)", file=sys.stderr)
        return 1
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="peerplane-demo-"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    fleet = Fleet(workdir, octet=0, readiness=True)
    try:
        heading("starting: control plane, 2 agents + HAProxy, backends")
        fleet.start()
        address = fleet.control_plane_address
        print(f"control plane: {address} (log {workdir / 'controlplane.log'})")
        for name, agent in fleet.agents.items():
            print(f"agent {name}: HAProxy on {agent.address} (log {agent.log})")
            print(f"  readiness (what a load balancer health-checks): {agent.readyz_url}")
        print(f"manifests (edit them, the control plane follows): {fleet.manifests}")

        heading("workloads (grpcurl ListWorkloads)")
        print(grpcurl(address, "peerplane.v1.PeerPlane/ListWorkloads"))

        first = next(iter(fleet.agents.values()))
        heading(f"rendered haproxy.cfg of {first.pod_name} ({first.config})")
        print(first.config.read_text())

        heading("inspect it yourself")
        print(f"{GRPCURL} -plaintext {address} list")
        print(f"{GRPCURL} -plaintext {address} describe peerplane.v1.PeerPlane")
        print(f"{GRPCURL} -plaintext {address} peerplane.v1.PeerPlane/ListWorkloads")
        print(
            f'{GRPCURL} -plaintext -d \'{{"workload": "{WORKLOAD}"}}\' {address} '
            "peerplane.v1.PeerPlane/GetSnapshot"
        )
        print(f"{GRPCURL} -plaintext {address} peerplane.v1.PeerPlane/ListAgents")
        print(f"{GRPCURL} -plaintext {address} grpc.health.v1.Health/Check")
        print(
            f"curl --interface {CLIENT} -H 'Host: shop.example.com' http://{first.address}:{HTTP_PORT}/"
        )
        print(f"echo | nc -s {CLIENT} {first.address} {TCP_PORT}   # the db TCP service")
        print(f"echo 'show table default_shop_http' | socat - UNIX:{first.runtime_socket}")

        heading("failover run")
        ok = failover(fleet)
        print(f"db over TCP through {first.address}:{TCP_PORT}: {tcp_get(first.address, CLIENT)}")
        if args.once:
            return 0 if ok else 1
        heading("running: Ctrl-C stops everything")
        try:
            while not stop.wait(0.5):
                pass
        except KeyboardInterrupt:
            pass
        return 0 if ok else 1
    finally:
        print("\nstopping ...", flush=True)
        fleet.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        print("stopped.")


if __name__ == "__main__":
    sys.exit(main())
