"""Status answer: how long `controlplane status` takes to answer for a control plane with
1,000 connected agents (`--quick`: 100).

The server process runs the real `ControlPlaneServer` over a `SnapshotStore` holding the
fan-out benchmark's cluster (`fanout.fanout_states`: the agents are the pods of one
DaemonSet, 20 Services of 20 endpoints). Agents are real gRPC streams (one channel each,
several worker processes), their pods on 127.2.x.y: each says Hello with its HAProxy
version, ACKs its snapshot with `applied_by`, and sends an AgentReport as a real agent
of that DaemonSet would (a session for every other peer, the control plane keeps 256;
20 stick tables). Measured once every report arrived: the wall time of the whole
`controlplane status --output json` process (interpreter start, imports, ListWorkloads,
ListAgents, rows, JSON), and of the calls and rows alone in this process; median of
`ROUNDS`. Target: under 1 s for the process at 1,000 agents.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from controlplane.compute import compute
from controlplane.fleetstatus import render, rows
from controlplane.publish import encode
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.bench.common import Child, Result, log, median, work_dir
from tests.bench.fanout import CHANNEL_OPTIONS, agent_name, fanout_states

NAMESPACE = "haproxy-system"
SERVICES = 20
TABLES = 20
AGENTS_PER_WORKER = 250
ROUNDS = 5
TARGETS = {"status.status_answer": "< 1 s at 1,000 agents"}


# ---------------------------------------------------------------------- server process


async def server_main(agents: int) -> None:
    state = fanout_states(agents, SERVICES, 0)[0]
    result = compute(state, {})
    store = SnapshotStore()
    store.publish(encode(result.workloads), result.pod_workloads)
    server = ControlPlaneServer(store)
    port = await server.start("127.0.0.1:0")
    print(json.dumps({"port": port}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "wait":
            end = time.monotonic() + command["timeout"]
            while True:
                sessions = server.registry.sessions()
                done = [s for s in sessions if s.acked_version and s.report is not None]
                if len(done) >= command["count"]:
                    print(json.dumps({"ready": len(done)}), flush=True)
                    break
                if time.monotonic() > end:
                    print(json.dumps({"error": f"{len(done)} ready"}), flush=True)
                    break
                await asyncio.sleep(0.05)
        elif command["op"] == "quit":
            break
    await server.stop(1.0)


# ---------------------------------------------------------------------- agent process


def _report(pod: str, peers: int) -> pb.AgentReport:
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return pb.AgentReport(
        haproxy_version="3.0.11",
        last_applied_by="start",
        last_applied_at=now,
        peer_sessions=[
            pb.PeerSession(name=agent_name(i), state="ESTA", connected=True)
            for i in range(peers)
            if agent_name(i) != pod
        ],
        tables=[
            pb.TableEntries(table=f"default_svc-{t:06d}_http", entries=t) for t in range(TABLES)
        ],
        observed_at=now,
    )


async def run_agent(pod: str, peers: int, target: str, stop: asyncio.Event) -> None:
    """Hello, ACK the snapshot, report; then hold the stream open until `stop`."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        method: Any = channel.stream_stream(
            "/peerplane.v1.PeerPlane/Stream",
            request_serializer=pb.AgentMessage.SerializeToString,
            response_deserializer=pb.ServerMessage.FromString,
        )
        call: Any = method()
        hello = pb.Hello(
            contract=CONTRACT,
            pod_namespace=NAMESPACE,
            pod_name=pod,
            node_name="bench",
            haproxy_version="3.0.11",
        )
        await call.write(pb.AgentMessage(hello=hello))
        message = await call.read()
        snap = message.snapshot
        ack = pb.Ack(
            nonce=message.nonce,
            version=snap.version,
            content_hash=snap.content_hash,
            applied_by="start",
        )
        await call.write(pb.AgentMessage(ack=ack))
        await call.write(pb.AgentMessage(report=_report(pod, peers)))
        await stop.wait()
        call.cancel()


async def agents_main(target: str, first: int, count: int, peers: int) -> None:
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(run_agent(agent_name(i), peers, target, stop))
        for i in range(first, first + count)
    ]
    print(json.dumps({"started": count}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------- the measurement


def _in_process(target: str) -> float:
    """The calls and the rows, without the interpreter start: seconds."""
    start = time.monotonic()
    options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(target, options=options) as channel:
        stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
        workloads = stub.ListWorkloads(pb.ListWorkloadsRequest(), timeout=30)
        agents = stub.ListAgents(pb.ListAgentsRequest(), timeout=30)
    found = rows.agent_rows(list(agents.agents), datetime.now(UTC))
    listed = rows.workload_rows(list(workloads.workloads), found)
    render.as_json(listed, found, rows.problems(found, 30), 30)
    return time.monotonic() - start


def measure(agents: int) -> list[Result]:
    with work_dir("bench-status-") as tmp:
        return _measure(tmp, agents)


def _measure(tmp: Path, agents: int) -> list[Result]:
    py = sys.executable
    server = Child([py, "-m", "tests.bench.status", "server", str(agents)], tmp / "server.log")
    workers: list[Child] = []
    try:
        target = f"127.0.0.1:{server.read(timeout=300)['port']}"
        share = min(AGENTS_PER_WORKER, agents)
        for first in range(0, agents, share):
            count = min(share, agents - first)
            argv = [py, "-m", "tests.bench.status", "agents", target, str(first), str(count)]
            workers.append(Child([*argv, str(agents)], tmp / f"agents-{first}.log"))
        for worker in workers:
            worker.read(timeout=120)
        ready = server.ask({"op": "wait", "count": agents, "timeout": 300}, timeout=330)
        if "error" in ready:
            raise RuntimeError(f"agents not synced and reported: {ready['error']}")
        argv = [py, "-m", "controlplane.cli", "status", "--control-plane", target]
        argv += ["--insecure", "--output", "json"]
        walls, calls = [], []
        size = 0
        for _ in range(ROUNDS):
            start = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
            walls.append(time.monotonic() - start)
            if done.returncode != 0:
                raise RuntimeError(f"status exited {done.returncode}: {done.stderr[-500:]}")
            listed = json.loads(done.stdout)["agents"]
            if len(listed) != agents or any(a["state"] != "SYNCED" for a in listed):
                raise RuntimeError("status did not list every agent SYNCED")
            size = len(done.stdout)
            calls.append(_in_process(target))
        log(
            f"status: {agents} agents, process p50 {median(walls) * 1000:.0f} ms, "
            f"calls+rows p50 {median(calls) * 1000:.0f} ms, JSON {size / 1e6:.1f} MB"
        )
        params = {"agents": agents, "rounds": ROUNDS, "peers_reported": agents - 1}
        return [
            Result("status.status_answer", median(walls) * 1000, "ms", params),
            Result("status.calls_and_rows", median(calls) * 1000, "ms", params),
        ]
    finally:
        for worker in workers:
            worker.send({"op": "quit"})
            worker.stop()
        server.send({"op": "quit"})
        server.stop()


def run(quick: bool = False) -> list[Result]:
    return measure(100 if quick else 1000)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.status")
    sub = parser.add_subparsers(dest="role")
    server = sub.add_parser("server")
    server.add_argument("agents", type=int)
    agents = sub.add_parser("agents")
    agents.add_argument("target")
    agents.add_argument("first", type=int)
    agents.add_argument("count", type=int)
    agents.add_argument("peers", type=int)
    bench = sub.add_parser("run")
    bench.add_argument("--agents", type=int, default=100)
    args = parser.parse_args()
    if args.role == "server":
        asyncio.run(server_main(args.agents))
    elif args.role == "agents":
        asyncio.run(agents_main(args.target, args.first, args.count, args.peers))
    else:
        for result in measure(getattr(args, "agents", 100)):
            print(json.dumps(result.to_json()))


if __name__ == "__main__":
    main()
