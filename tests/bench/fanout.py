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

Full vs delta (`compare`): the same streams holding a 2,000-Service snapshot (`--quick`:
50 streams, 100 Services), publish to last ACK, CPU per version and bytes received per
stream per version, once with agents that do not announce `accepts_deltas` (full
snapshots, 5 versions: each sends 2 GB) and once with agents that do (20 versions). The
simulated agents read a snapshot's envelope only and materialize every delta themselves
(`tests/bench/deltas.py`, one `Holder` per worker process), checking each result's hash.
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
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import grpc

from controlplane.compute import compute
from controlplane.model import ClusterState
from controlplane.publish import encode
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench import deltas
from tests.bench.common import (
    Child,
    Result,
    big_cluster,
    log,
    loopback_ip,
    median,
    percentile,
    rss_kib,
    work_dir,
)
from tests.helpers.builders import haproxy_pod

NAMESPACE = "haproxy-system"
VERSIONS = 20
AGENTS_PER_WORKER = 250
POLL_S = 0.005
COMPARE_SERVICES = 2000  # full vs delta: the cluster
FULL_VERSIONS = 5  # full snapshots of it: seconds per version


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
    # Encoded contents only: 21 computed results of 2,000 Services would not fit.
    results = []
    assignment: Any = {}
    for state in fanout_states(agents, services, versions):
        result = compute(state, assignment)
        assignment = result.assignment
        results.append((encode(result.workloads), result.pod_workloads))
    store = SnapshotStore()
    store.publish(*results[0])
    workload = next(iter(results[0][0]))
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
                store.publish(*results[index])
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
    accepts_deltas: bool = False
    applied_hash: str = ""
    applied_version: int = 0
    snapshots: int = 0
    snapshot_bytes: int = 0
    deltas: int = 0
    delta_bytes: int = 0
    resyncs: int = 0  # NACKs with resync sent: a delta this agent could not materialize
    in_sync: int = 0
    answered: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class Holder:
    """The snapshots the agents of one worker process hold, shared by content hash (a
    thousand copies of a 2 MB snapshot would not fit): every content is parsed and its
    hash checked once per worker, every delta materialized from the held base and its
    result's hash checked against `to_content_hash` (again for an agent whose delta bytes
    differ from the ones already materialized)."""

    KEEP = 4

    def __init__(self) -> None:
        self.snapshots: OrderedDict[str, pb.Snapshot] = OrderedDict()
        self.delta_of: dict[str, bytes] = {}  # to_content_hash -> delta bytes materialized
        self.verified = 0
        self.mismatches = 0

    def _keep(self, snapshot: pb.Snapshot) -> None:
        self.snapshots[snapshot.content_hash] = snapshot
        self.snapshots.move_to_end(snapshot.content_hash)
        while len(self.snapshots) > self.KEEP:
            gone, _ = self.snapshots.popitem(last=False)
            self.delta_of.pop(gone, None)

    def hold(self, envelope: deltas.SnapshotEnvelope) -> None:
        if envelope.content_hash in self.snapshots:
            return
        snapshot = pb.Snapshot.FromString(envelope.snapshot)
        if not deltas.verify(snapshot):
            self.mismatches += 1
            raise RuntimeError(f"snapshot {envelope.content_hash[:12]}: content hash differs")
        self.verified += 1
        self._keep(snapshot)

    def materialize(self, delta: pb.SnapshotDelta) -> str:
        """ "" when the delta's result is held and verified; else why not (NACK resync)."""
        raw = delta.SerializeToString(deterministic=True)
        target = delta.to_content_hash
        if target in self.snapshots and self.delta_of.get(target) == raw:
            return ""
        held = self.snapshots.get(delta.from_content_hash)
        if held is None:
            return f"base {delta.from_content_hash[:12]} not held"
        try:
            result = deltas.apply_delta(held, delta)
        except deltas.DeltaError as err:
            return str(err)
        if not deltas.verify(result):
            self.mismatches += 1
            return f"materialized content hash differs from {target[:12]}"
        self.verified += 1
        self._keep(result)
        self.delta_of[target] = raw
        return ""


CHANNEL_OPTIONS = [
    ("grpc.use_local_subchannel_pool", 1),  # one TCP connection per agent, as in a fleet
    ("grpc.keepalive_time_ms", 20_000),
]


async def run_agent(agent: SimAgent, target: str, stop: asyncio.Event, holder: Holder) -> None:
    """One stream: Hello with what it runs, then ACK every snapshot (and every delta it
    materialized; NACK with resync the others); ends on `stop`."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        method: Any = channel.stream_stream(
            "/peerplane.v1.PeerPlane/Stream",
            request_serializer=pb.AgentMessage.SerializeToString,
            response_deserializer=lambda raw: raw,
        )
        call: Any = method()
        hello = pb.Hello(
            contract=CONTRACT,
            pod_namespace=NAMESPACE,
            pod_name=agent.pod,
            node_name="bench",
            applied_content_hash=agent.applied_hash,
            applied_version=agent.applied_version,
            agent_version="bench",
            accepts_deltas=agent.accepts_deltas,
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
                await answer(agent, call, raw, holder)
                agent.answered.set()
        finally:
            stopper.cancel()
            call.cancel()


async def answer(agent: SimAgent, call: Any, raw: bytes, holder: Holder) -> None:
    """ACK a snapshot read from its envelope (held when the agent takes deltas), ACK a
    delta materialized and verified, NACK with resync one that is not."""
    envelope = deltas.snapshot_envelope(raw)
    if envelope is not None:
        agent.snapshots += 1
        agent.snapshot_bytes += len(raw)
        if agent.accepts_deltas:
            holder.hold(envelope)
        ack = pb.Ack(
            nonce=envelope.nonce, version=envelope.version, content_hash=envelope.content_hash
        )
        await call.write(pb.AgentMessage(ack=ack))
        agent.applied_hash, agent.applied_version = envelope.content_hash, envelope.version
        return
    message = pb.ServerMessage.FromString(raw)
    kind = message.WhichOneof("message")
    if kind == "delta":
        agent.deltas += 1
        agent.delta_bytes += len(raw)
        delta = message.delta
        why = (
            f"base {delta.from_content_hash[:12]} is not what this agent runs"
            if delta.from_content_hash != agent.applied_hash
            else holder.materialize(delta)
        )
        if why:
            agent.resyncs += 1
            nack = pb.Nack(
                nonce=message.nonce,
                version=delta.version,
                content_hash=delta.to_content_hash,
                error=why,
                resync=True,
            )
            await call.write(pb.AgentMessage(nack=nack))
            return
        ack = pb.Ack(nonce=message.nonce, version=delta.version, content_hash=delta.to_content_hash)
        await call.write(pb.AgentMessage(ack=ack))
        agent.applied_hash, agent.applied_version = delta.to_content_hash, delta.version
    elif kind == "in_sync":
        agent.in_sync += 1


async def agents_main(target: str, first: int, count: int, accepts_deltas: bool = False) -> None:
    loop = asyncio.get_running_loop()
    agents = [SimAgent(agent_name(i), accepts_deltas) for i in range(first, first + count)]
    holder = Holder()

    def reply(data: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    async def connect_all() -> tuple[asyncio.Event, list[asyncio.Task[None]], float]:
        stop = asyncio.Event()
        for agent in agents:
            agent.answered = asyncio.Event()
        start = time.monotonic()
        tasks = [asyncio.create_task(run_agent(a, target, stop, holder)) for a in agents]
        await asyncio.gather(*(a.answered.wait() for a in agents))
        return stop, tasks, time.monotonic() - start

    stop, tasks, elapsed = await connect_all()
    reply({"connected": count, "elapsed_s": elapsed})
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        op = json.loads(line)["op"]
        if op == "stats":
            reply(
                {
                    "snapshots": sum(a.snapshots for a in agents),
                    "snapshot_bytes": sum(a.snapshot_bytes for a in agents),
                    "deltas": sum(a.deltas for a in agents),
                    "delta_bytes": sum(a.delta_bytes for a in agents),
                    "resyncs": sum(a.resyncs for a in agents),
                    "verified": holder.verified,
                    "mismatches": holder.mismatches,
                }
            )
        elif op == "reconnect":
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


@dataclasses.dataclass
class Session:
    """What one server + agents run measured (times in seconds)."""

    agents: int
    workers: int
    message_bytes: int
    connect_s: float
    rss_before_kib: int
    rss_after_kib: int
    latencies: list[float]
    cpu: list[float]
    received: dict[str, int]  # agents' counters over the published versions
    storm: dict[str, float] | None


def _stats(children: list[Child]) -> dict[str, int]:
    total: dict[str, int] = {}
    for child in children:
        for key, value in child.ask({"op": "stats"}, timeout=60).items():
            total[key] = total.get(key, 0) + int(value)
    return total


def session(
    agents: int, services: int, versions: int, accepts_deltas: bool, storm: bool
) -> Session:
    """One server process and its agent worker processes: connect, sync, publish
    `versions` versions one by one (each to the last ACK), optionally a reconnect storm."""
    with work_dir("bench-fanout-") as tmp:
        return _session(tmp, agents, services, versions, accepts_deltas, storm)


def _session(
    tmp: Path, agents: int, services: int, versions: int, accepts_deltas: bool, storm: bool
) -> Session:
    workers = max(1, -(-agents // AGENTS_PER_WORKER))
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
    # A 2 MB snapshot to 1,000 streams takes a while; so does each full version.
    sync_timeout = 60 + agents * services / 4000
    try:
        hello = server.read(timeout=300)
        port, rss_before = hello["port"], hello["rss_kib"]
        target = f"127.0.0.1:{port}"
        share = -(-agents // workers)
        flags = ["--deltas"] if accepts_deltas else []
        for w in range(workers):
            first = w * share
            count = min(share, agents - first)
            children.append(
                Child(
                    [
                        py,
                        "-m",
                        "tests.bench.fanout",
                        "agents",
                        target,
                        str(first),
                        str(count),
                        *flags,
                    ],
                    tmp / f"agents-{w}.log",
                )
            )
        connect_times = [c.read(timeout=sync_timeout)["elapsed_s"] for c in children]
        synced = server.ask(
            {"op": "wait", "count": agents, "timeout": sync_timeout}, timeout=sync_timeout + 30
        )
        if "error" in synced:
            raise RuntimeError(f"initial sync: {synced['error']}")
        rss_after = synced["rss_kib"]
        log(f"fanout: {agents} streams connected in {max(connect_times):.1f}s")
        before = _stats(children)
        latencies: list[float] = []
        cpu: list[float] = []
        for index in range(1, versions + 1):
            answer = server.ask(
                {"op": "publish", "index": index, "count": agents, "timeout": sync_timeout},
                timeout=sync_timeout + 30,
            )
            if "error" in answer:
                raise RuntimeError(f"version {index}: {answer['error']}")
            latencies.append(answer["latency_s"])
            cpu.append(answer["cpu_s"])
        after = _stats(children)
        received = {k: after[k] - before.get(k, 0) for k in after}
        mode = "delta" if accepts_deltas else "full"
        log(f"fanout {services} Services {mode}: p50 {median(latencies) * 1000:.0f} ms")
        found_storm = None
        if storm:
            for child in children:
                child.send({"op": "reconnect"})
            answers = [child.read(timeout=120) for child in children]
            found_storm = {
                "elapsed_s": max(s["elapsed_s"] for s in answers),
                "snapshot_bytes": sum(s["snapshot_bytes"] for s in answers),
                "in_sync": sum(s["in_sync"] for s in answers),
            }
        for child in children:
            child.send({"op": "quit"})
        server.send({"op": "quit"})
    finally:
        for child in children:
            child.stop()
        server.stop()
    return Session(
        agents,
        workers,
        hello["message_bytes"],
        max(connect_times),
        rss_before,
        rss_after,
        latencies,
        cpu,
        received,
        found_storm,
    )


def classic(agents: int, services: int, versions: int) -> list[Result]:
    """The figures of the fan-out of full snapshots of a small cluster: latency, memory
    per stream, CPU per version (bytes built once vs per stream), reconnect storm."""
    run_ = session(agents, services, versions, accepts_deltas=False, storm=True)
    assert run_.storm is not None
    serialize_s, message_bytes = serialization_cost(agents, services)
    params: dict[str, Any] = {
        "streams": agents,
        "worker_processes": run_.workers,
        "versions": versions,
        "snapshot_bytes": message_bytes,
        "services": services,
    }
    cpu_cached = median(run_.cpu)
    cpu_per_stream = cpu_cached + (agents - 1) * serialize_s
    latencies = run_.latencies
    return [
        Result("fanout.publish_to_last_ack_p50", percentile(latencies, 50) * 1000, "ms", params),
        Result("fanout.publish_to_last_ack_p99", percentile(latencies, 99) * 1000, "ms", params),
        Result("fanout.connect_all", run_.connect_s, "s", params),
        Result(
            "fanout.server_memory_per_stream",
            (run_.rss_after_kib - run_.rss_before_kib) / agents,
            "KiB/stream",
            {
                **params,
                "rss_before_mib": round(run_.rss_before_kib / 1024),
                "rss_after_mib": round(run_.rss_after_kib / 1024),
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
        Result("fanout.reconnect_storm_all_back", run_.storm["elapsed_s"], "s", params),
        Result(
            "fanout.reconnect_storm_snapshot_bytes", run_.storm["snapshot_bytes"], "bytes", params
        ),
        Result("fanout.reconnect_storm_in_sync", run_.storm["in_sync"], "streams", params),
    ]


def compare(agents: int, services: int, versions: dict[str, int]) -> list[Result]:
    """Full snapshots vs deltas to `agents` streams holding a `services`-Service snapshot,
    one endpoint change per version. Mode full: the agents do not announce deltas (what
    the server does for any such agent, `--no-deltas` or not); mode delta: they do, and
    materialize and verify every delta. When the server sends none, says so."""
    results: list[Result] = []
    rows = []
    for mode, count in versions.items():
        run_ = session(agents, services, count, accepts_deltas=mode == "delta", storm=False)
        got = run_.received
        per_version = (got.get("snapshot_bytes", 0) + got.get("delta_bytes", 0)) / (agents * count)
        note = ""
        if mode == "delta" and not got.get("deltas"):
            note = "server sends no deltas"
        if got.get("mismatches") or got.get("resyncs"):
            raise RuntimeError(f"fanout {mode}: deltas not materialized: {got}")
        params: dict[str, Any] = {
            "streams": agents,
            "services": services,
            "mode": mode,
            "versions": count,
            "worker_processes": run_.workers,
            "snapshot_bytes": run_.message_bytes,
            "deltas_received": got.get("deltas", 0),
            "snapshots_received": got.get("snapshots", 0),
            "verified_per_worker": round(got.get("verified", 0) / run_.workers, 1),
        }
        if note:
            params["note"] = note
        base = f"fanout.s{services}.{mode}"
        p50 = percentile(run_.latencies, 50) * 1000
        p99 = percentile(run_.latencies, 99) * 1000
        cpu = median(run_.cpu) * 1000
        results += [
            Result(f"{base}.publish_to_last_ack_p50", p50, "ms", params),
            Result(f"{base}.publish_to_last_ack_p99", p99, "ms", params),
            Result(f"{base}.cpu_per_version", cpu, "ms", params),
            Result(f"{base}.bytes_per_stream_per_version", per_version, "bytes", params),
        ]
        rows.append(
            f"{services:>6,}  {mode:<5}  {agents:>7,}  {count:>8}  {p50:>8,.0f}  {p99:>8,.0f}"
            f"  {cpu:>9,.0f}  {per_version:>12,.0f}  {note}"
        )
    print(
        "fan-out, full vs delta (ms; CPU: control plane per version; bytes received per "
        "stream per version)\n"
        "  svcs  mode   streams  versions       p50       p99  CPU/vers  bytes/stream\n"
        + "\n".join(rows)
    )
    return results


# Targets (README, "Performance"), set at the full sizes: figure pattern -> target.
TARGETS = {
    "fanout.publish_to_last_ack_p99": "< 1 s at 1,000 streams",
    "fanout.server_memory_per_stream": "< 100 KB",
    "fanout.reconnect_storm_snapshot_bytes": "0",
    "fanout.reconnect_storm_all_back": "< 5 s at 1,000 streams",
    "fanout.s*.delta.publish_to_last_ack_p99": "< 1 s at 1,000 streams",
}


def run(quick: bool = False, agents: int | None = None, services: int = 50) -> list[Result]:
    agents = agents or (40 if quick else 1000)
    versions = 3 if quick else VERSIONS
    results = classic(agents, services, versions)
    # Full snapshots of 2,000 Services to 1,000 streams cost seconds per version: fewer.
    compare_agents = 50 if quick else agents
    compare_services = 100 if quick else COMPARE_SERVICES
    counts = {"full": 3 if quick else FULL_VERSIONS, "delta": versions}
    return results + compare(compare_agents, compare_services, counts)


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
    agents.add_argument("--deltas", action="store_true", help="announce accepts_deltas")
    args = parser.parse_args(argv)
    if args.command == "server":
        asyncio.run(server_main(args.agents, args.services, args.versions))
    elif args.command == "agents":
        asyncio.run(agents_main(args.target, args.first, args.count, args.deltas))
    else:
        from tests.bench.__main__ import main as bench_main

        raise SystemExit(bench_main(["fanout", *(argv or sys.argv[1:])]))


if __name__ == "__main__":
    main()
