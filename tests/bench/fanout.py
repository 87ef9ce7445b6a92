"""Fan-out: one control-plane server process, many agent streams, 20 published versions.

The server runs the real `ControlPlaneServer` (grpc.aio) over a `SnapshotStore` in its own
process; it publishes precomputed versions on command and polls its agent registry
(every 5 ms) until every stream has acknowledged the version: that is "publish to last
ACK". Agents are real gRPC clients, one channel (own TCP connection: local subchannel
pool) and one stream per agent, many per process, in several worker processes; they
parse each snapshot and ACK it at once.

The snapshot is what a DaemonSet of that many HAProxy pods gets: every agent's pod is a
peer, plus `--services` Services x 20 endpoints. Memory per stream is the server's RSS
after all streams synced minus its RSS before they connected, divided by the streams.
CPU per version is the server's process CPU time (all threads) from publish to last ACK.
The cost of serializing per stream instead of once per version is the measured
serialization time of one snapshot message, times the streams (a microbenchmark: the
server has no switch for it).

Set BENCH_PROFILE=FILE to write a cProfile of the server's publish phase (event-loop
thread) to FILE.

Reconnect storm: every agent drops its channel and reconnects at once, its Hello carrying
the content hash it runs; counted: snapshot bytes received (expected 0, all InSync) and
the time until every stream has its answer.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import json
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from controlplane.compute import compute
from controlplane.model import ClusterState
from controlplane.publish import encode
from controlplane.server import ControlPlaneServer
from controlplane.store import SnapshotStore
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import (
    Child,
    Result,
    big_cluster,
    log,
    loopback_ip,
    median,
    percentile,
    rss_kib,
)
from tests.helpers.builders import haproxy_pod

NAMESPACE = "haproxy-system"
VERSIONS = 20
AGENTS_PER_WORKER = 250
POLL_S = 0.005


def agent_name(index: int) -> str:
    return f"agent-{index:05d}"


def fanout_states(agents: int, services: int, versions: int) -> list[ClusterState]:
    """Base state (agents HAProxy pods, Services x 20 endpoints), then one endpoint change
    per version."""
    base = big_cluster(services)
    pods = tuple(
        haproxy_pod(agent_name(i), loopback_ip(i, base=0x7F_02_00_00)) for i in range(agents)
    )
    base = dataclasses.replace(base, haproxy_pods=pods)
    states = [base]
    for v in range(1, versions + 1):
        slices = list(base.endpoint_slices)
        first = slices[0]
        moved = dataclasses.replace(
            first.endpoints[0], addresses=(loopback_ip(v, base=0x7F_61_00_00),)
        )
        slices[0] = dataclasses.replace(first, endpoints=(moved, *first.endpoints[1:]))
        states.append(dataclasses.replace(base, endpoint_slices=tuple(slices)))
    return states


# ---------------------------------------------------------------------- server process


async def server_main(agents: int, services: int, versions: int) -> None:
    states = fanout_states(agents, services, versions)
    results = []
    assignment: Any = {}
    for state in states:
        result = compute(state, assignment)
        assignment = result.assignment
        results.append(result)
    store = SnapshotStore()
    store.publish(encode(results[0].workloads), results[0].pod_workloads)
    workload = next(iter(results[0].workloads))
    server = ControlPlaneServer(store)
    port = await server.start("127.0.0.1:0")
    loop = asyncio.get_running_loop()

    def reply(data: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    published = store.get(workload)
    assert published is not None
    reply({"port": port, "rss_kib": rss_kib(), "message_bytes": len(published.message_bytes)})

    async def all_acked(version: int, count: int, timeout: float) -> float:
        end = time.monotonic() + timeout
        while True:
            sessions = server.registry.sessions()
            if len(sessions) >= count and all(s.acked_version >= version for s in sessions):
                return time.monotonic()
            if time.monotonic() > end:
                acked = sum(1 for s in sessions if s.acked_version >= version)
                raise TimeoutError(f"{acked}/{len(sessions)} acked v{version}")
            await asyncio.sleep(POLL_S)

    profile_to = os.environ.get("BENCH_PROFILE")  # a file: cProfile of the publish phase
    profiler = cProfile.Profile() if profile_to else None
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        op = command["op"]
        if profiler is not None and op == "publish" and command["index"] == 1:
            profiler.enable()
        try:
            if op == "rss":
                reply({"rss_kib": rss_kib(), "streams": len(server.registry.sessions())})
            elif op == "wait":
                current = store.get(workload)
                assert current is not None
                await all_acked(current.version, command["count"], command["timeout"])
                reply({"version": current.version, "rss_kib": rss_kib()})
            elif op == "publish":
                index = command["index"]
                cpu0 = time.process_time()
                start = time.monotonic()
                store.publish(encode(results[index].workloads), results[index].pod_workloads)
                current = store.get(workload)
                assert current is not None
                last = await all_acked(current.version, command["count"], command["timeout"])
                reply(
                    {
                        "version": current.version,
                        "latency_s": last - start,
                        "cpu_s": time.process_time() - cpu0,
                    }
                )
            elif op == "quit":
                break
        except TimeoutError as err:
            reply({"error": str(err)})
    if profiler is not None and profile_to:
        profiler.disable()
        with open(profile_to, "w") as out:
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
    await server.stop(1.0)


# ---------------------------------------------------------------------- agent process


@dataclasses.dataclass
class SimAgent:
    pod: str
    applied_hash: str = ""
    applied_version: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    in_sync: int = 0
    answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),  # one TCP connection per agent, as in a fleet
    ("grpc.keepalive_time_ms", 20_000),
]


async def run_agent(agent: SimAgent, target: str, stop: asyncio.Event) -> None:
    """One stream: Hello with what it runs, then ACK every snapshot; ends on `stop`."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        method: Any = channel.stream_stream(
            "/peerplane.v1.PeerPlane/Stream",
            request_serializer=pb.AgentMessage.SerializeToString,
            response_deserializer=lambda raw: raw,
        )
        call: Any = method()
        hello = pb.Hello(
            pod_namespace=NAMESPACE,
            pod_name=agent.pod,
            node_name="bench",
            applied_content_hash=agent.applied_hash,
            applied_version=agent.applied_version,
            agent_version="bench",
        )
        await call.write(pb.AgentMessage(hello=hello))
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                reading = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait(
                    {reading, stopper}, return_when=asyncio.FIRST_COMPLETED
                )
                if stopper in done:
                    reading.cancel()
                    break
                raw = reading.result()
                if not isinstance(raw, bytes):  # grpc.aio.EOF: the server ended the stream
                    break
                message = pb.ServerMessage.FromString(raw)
                kind = message.WhichOneof("message")
                if kind == "snapshot":
                    agent.snapshots += 1
                    agent.snapshot_bytes += len(raw)
                    snap = message.snapshot
                    ack = pb.Ack(
                        nonce=message.nonce, version=snap.version, content_hash=snap.content_hash
                    )
                    await call.write(pb.AgentMessage(ack=ack))
                    agent.applied_hash, agent.applied_version = snap.content_hash, snap.version
                elif kind == "in_sync":
                    agent.in_sync += 1
                agent.answered.set()
        finally:
            stopper.cancel()
            call.cancel()


async def agents_main(target: str, first: int, count: int) -> None:
    loop = asyncio.get_running_loop()
    agents = [SimAgent(agent_name(i)) for i in range(first, first + count)]

    def reply(data: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    async def connect_all() -> tuple[asyncio.Event, list[asyncio.Task[None]], float]:
        stop = asyncio.Event()
        for agent in agents:
            agent.answered = asyncio.Event()
        start = time.monotonic()
        tasks = [asyncio.create_task(run_agent(a, target, stop)) for a in agents]
        await asyncio.gather(*(a.answered.wait() for a in agents))
        return stop, tasks, time.monotonic() - start

    stop, tasks, elapsed = await connect_all()
    reply({"connected": count, "elapsed_s": elapsed})
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        op = json.loads(line)["op"]
        if op == "reconnect":
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for agent in agents:
                agent.snapshots = agent.snapshot_bytes = agent.in_sync = 0
            stop, tasks, elapsed = await connect_all()
            reply(
                {
                    "elapsed_s": elapsed,
                    "snapshot_bytes": sum(a.snapshot_bytes for a in agents),
                    "snapshots": sum(a.snapshots for a in agents),
                    "in_sync": sum(a.in_sync for a in agents),
                }
            )
        elif op == "quit":
            break
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------- driver


def serialization_cost(agents: int, services: int) -> tuple[float, int]:
    """Seconds to build ServerMessage(snapshot) bytes once (best of 20), and their size."""
    result = compute(fanout_states(agents, services, 0)[0], {})
    content: Any = next(iter(encode(result.workloads).values()))
    snapshot = content.message(version=1) if hasattr(content, "message") else content
    times = []
    for _ in range(20):
        start = time.perf_counter()
        data = pb.ServerMessage(snapshot=snapshot).SerializeToString(deterministic=True)
        times.append(time.perf_counter() - start)
    return min(times), len(data)


def run(quick: bool = False, agents: int | None = None, services: int = 50) -> list[Result]:
    agents = agents or (40 if quick else 1000)
    versions = 3 if quick else VERSIONS
    workers = max(1, -(-agents // AGENTS_PER_WORKER))
    tmp = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    py = sys.executable
    server = Child(
        [
            py,
            "-m",
            "tests.bench.fanout",
            "server",
            f"--agents={agents}",
            f"--services={services}",
            f"--versions={versions}",
        ],
        tmp / "server.log",
    )
    children: list[Child] = []
    try:
        hello = server.read(timeout=120)
        port, rss_before = hello["port"], hello["rss_kib"]
        target = f"127.0.0.1:{port}"
        share = -(-agents // workers)
        for w in range(workers):
            first = w * share
            count = min(share, agents - first)
            children.append(
                Child(
                    [py, "-m", "tests.bench.fanout", "agents", target, str(first), str(count)],
                    tmp / f"agents-{w}.log",
                )
            )
        connect_times = [c.read(timeout=120)["elapsed_s"] for c in children]
        synced = server.ask({"op": "wait", "count": agents, "timeout": 60}, timeout=90)
        rss_after = synced["rss_kib"]
        log(f"fanout: {agents} streams connected in {max(connect_times):.1f}s")

        latencies: list[float] = []
        cpu: list[float] = []
        for index in range(1, versions + 1):
            answer = server.ask(
                {"op": "publish", "index": index, "count": agents, "timeout": 30}, timeout=60
            )
            if "error" in answer:
                raise RuntimeError(f"version {index}: {answer['error']}")
            latencies.append(answer["latency_s"])
            cpu.append(answer["cpu_s"])
        log(f"fanout: publish->last ACK p50 {median(latencies) * 1000:.0f} ms")

        for child in children:
            child.send({"op": "reconnect"})
        storm = [child.read(timeout=120) for child in children]
        storm_s = max(s["elapsed_s"] for s in storm)
        storm_bytes = sum(s["snapshot_bytes"] for s in storm)
        storm_insync = sum(s["in_sync"] for s in storm)
        for child in children:
            child.send({"op": "quit"})
        server.send({"op": "quit"})
    finally:
        for child in children:
            child.stop()
        server.stop()

    serialize_s, message_bytes = serialization_cost(agents, services)
    params: dict[str, Any] = {
        "streams": agents,
        "worker_processes": workers,
        "versions": versions,
        "snapshot_bytes": message_bytes,
        "services": services,
    }
    cpu_cached = median(cpu)
    cpu_per_stream = cpu_cached + (agents - 1) * serialize_s
    return [
        Result("fanout.publish_to_last_ack_p50", percentile(latencies, 50) * 1000, "ms", params),
        Result("fanout.publish_to_last_ack_p99", percentile(latencies, 99) * 1000, "ms", params),
        Result("fanout.connect_all", max(connect_times), "s", params),
        Result(
            "fanout.server_memory_per_stream",
            (rss_after - rss_before) / agents,
            "KiB/stream",
            {
                **params,
                "rss_before_mib": round(rss_before / 1024),
                "rss_after_mib": round(rss_after / 1024),
            },
        ),
        Result("fanout.cpu_per_version_bytes_once", cpu_cached * 1000, "ms", params),
        Result("fanout.serialize_one_snapshot", serialize_s * 1000, "ms", params),
        Result("fanout.cpu_per_version_bytes_per_stream_est", cpu_per_stream * 1000, "ms", params),
        Result(
            "fanout.per_stream_over_once",
            cpu_per_stream / cpu_cached,
            "ratio",
            {**params, "what": "CPU per version, serialized per stream / once (estimate)"},
        ),
        Result("fanout.reconnect_storm_all_back", storm_s, "s", params),
        Result("fanout.reconnect_storm_snapshot_bytes", storm_bytes, "bytes", params),
        Result("fanout.reconnect_storm_in_sync", storm_insync, "streams", params),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command")
    server = commands.add_parser("server")
    server.add_argument("--agents", type=int, default=1000)
    server.add_argument("--services", type=int, default=50)
    server.add_argument("--versions", type=int, default=VERSIONS)
    agents = commands.add_parser("agents")
    agents.add_argument("target")
    agents.add_argument("first", type=int)
    agents.add_argument("count", type=int)
    args = parser.parse_args(argv)
    if args.command == "server":
        asyncio.run(server_main(args.agents, args.services, args.versions))
    elif args.command == "agents":
        asyncio.run(agents_main(args.target, args.first, args.count))
    else:
        from tests.bench.__main__ import main as bench_main

        raise SystemExit(bench_main(["fanout", *(argv or sys.argv[1:])]))


if __name__ == "__main__":
    main()
