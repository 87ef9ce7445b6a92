"""End to end: a manifest change in the watched folder to the last of two agents ACKing.

Runs the real `controlplane serve --source files:DIR` on a free loopback port. The node
agent has not landed yet, so the two agents are the fan-out benchmark's simulated agents
(real gRPC streams that ACK each snapshot on receipt; no HAProxy behind them). Each sample
rewrites the EndpointSlice file (atomic rename) with one address moved, then polls
ListAgents over gRPC every 10 ms until both agents acknowledged a newer version. The figure
includes the folder's polling interval (0.2 s) and the debounce (0.1 s of quiet).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grpc

from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.bench.common import Child, Result, log, median, percentile
from tests.bench.fanout import agent_name
from tests.bench.haproxy import free_port

POLL_S = 0.01

HAPROXY_PODS = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: haproxy-system
  labels: {{app.kubernetes.io/component: haproxy}}
  ownerReferences:
    - {{apiVersion: apps/v1, kind: DaemonSet, name: haproxy, controller: true}}
status: {{phase: Running, podIP: "{ip}"}}
"""

SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: shop
  namespace: default
  annotations: {"haproxy.org/expose": "true", "haproxy.org/source-ip-persistence": "true"}
spec:
  ports: [{name: http, port: 80, targetPort: 8888}]
"""

SLICE = """\
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: shop-abcde
  namespace: default
  labels: {{kubernetes.io/service-name: shop}}
addressType: IPv4
ports: [{{name: http, port: 8888, protocol: TCP}}]
endpoints:
  - addresses: ["127.0.3.1"]
  - addresses: ["127.0.3.{last}"]
"""


def write(path: Path, text: str) -> None:
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, path)


def acked_versions(stub: peerplane_pb2_grpc.PeerPlaneStub) -> list[int]:
    response = stub.ListAgents(pb.ListAgentsRequest(), timeout=2)
    return [agent.acked_version for agent in response.agents]


def run(quick: bool = False) -> list[Result]:
    samples = 3 if quick else 20
    work = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    manifests = work / "manifests"
    manifests.mkdir()
    pods = "---\n".join(
        HAPROXY_PODS.format(name=agent_name(i), ip=f"127.0.1.{i + 1}") for i in range(2)
    )
    write(manifests / "haproxy.yaml", pods)
    write(manifests / "shop.yaml", SERVICE)
    write(manifests / "shop-slice.yaml", SLICE.format(last=2))
    port = free_port()
    target = f"127.0.0.1:{port}"
    py = sys.executable
    server = Child(
        [
            py,
            "-m",
            "controlplane.cli",
            "serve",
            f"--source=files:{manifests}",
            f"--listen={target}",
            "--insecure",
        ],
        work / "serve.log",
    )
    agents: Child | None = None
    latencies: list[float] = []
    try:
        with grpc.insecure_channel(target) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
            agents = Child(
                [py, "-m", "tests.bench.fanout", "agents", target, "0", "2"], work / "agents.log"
            )
            agents.read(timeout=30)
            end = time.monotonic() + 30
            while len(versions := acked_versions(stub)) < 2 or min(versions) < 1:
                if time.monotonic() > end:
                    raise TimeoutError(f"agents not in sync: {versions}\n{server.tail()}")
                time.sleep(POLL_S)
            for sample in range(samples):
                before = min(acked_versions(stub))
                start = time.monotonic()
                write(manifests / "shop-slice.yaml", SLICE.format(last=3 + sample % 200))
                end = start + 10
                while min(acked_versions(stub)) <= before:
                    if time.monotonic() > end:
                        raise TimeoutError(f"no ACK of a new version\n{server.tail()}")
                    time.sleep(POLL_S)
                latencies.append(time.monotonic() - start)
                time.sleep(0.25)
            agents.send({"op": "quit"})
    finally:
        if agents is not None:
            agents.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    log(f"e2e: p50 {median(latencies) * 1000:.0f} ms")
    params = {
        "samples": samples,
        "agents": 2,
        "agent": "simulated (ACK on receipt)",
        "poll_interval_s": 0.2,
        "debounce_s": 0.1,
    }
    return [
        Result("e2e.manifest_to_last_ack_p50", median(latencies) * 1000, "ms", params),
        Result("e2e.manifest_to_last_ack_p99", percentile(latencies, 99) * 1000, "ms", params),
    ]


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["e2e"]))
