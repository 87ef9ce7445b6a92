"""Load with faults' shape: many agent streams on one `controlplane serve --source
kubernetes` process while the fake API server churns endpoints, then convergence, lost
streams and the control plane's RSS. Used by tests/system/test_faults_load.py (scaled down) and
`python -m tests.bench churn` (1,000 streams, 60 s).

Simulated agents live in worker processes (`python -m tests.helpers.churn agents ...`,
JSON lines on stdin/stdout): each opens one stream, ACKs every snapshot and counts a
stream that ends while it did not ask for it as lost (then reconnects, so convergence is
still checked separately).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc

from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Child, rss_kib
from tests.helpers.server_process import ServeProcess
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import config_map, endpoint_slice, pod, service, write_kubeconfig

NS = "haproxy-system"
WORKLOAD = f"{NS}/DaemonSet/haproxy"
AGENTS_PER_WORKER = 250
ENDPOINTS = 20
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]


def agent_name(index: int) -> str:
    return f"haproxy-{index:05d}"


def agent_ip(index: int) -> str:
    return f"127.20.{index // 250}.{index % 250 + 1}"


def endpoints(step: int) -> dict[str, bool]:
    """The shop slice at churn step `step`: 20 endpoints, one replaced per step and one
    readiness flipped, so every step is a real change."""
    ready = {f"10.21.0.{i}": True for i in range(1, ENDPOINTS)}
    ready[f"10.21.{1 + step // 250}.{step % 250 + 1}"] = True
    ready[f"10.21.0.{1 + step % (ENDPOINTS - 1)}"] = step % 2 == 0
    return ready


# ---------------------------------------------------------------------- agents (worker)


@dataclass
class SimAgent:
    pod: str
    hash: str = ""
    version: int = 0
    opened: int = 0
    lost: int = 0


async def run_agent(agent: SimAgent, target: str, stop: asyncio.Event) -> None:
    """One agent: stream, ACK everything; a stream that ends unasked is lost, reconnect."""
    while not stop.is_set():
        async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
            method: Any = channel.stream_stream(
                "/peerplane.v1.PeerPlane/Stream",
                request_serializer=pb.AgentMessage.SerializeToString,
                response_deserializer=pb.ServerMessage.FromString,
            )
            call: Any = method()
            agent.opened += 1
            hello = pb.Hello(
                contract=CONTRACT,
                pod_namespace=NS,
                pod_name=agent.pod,
                applied_content_hash=agent.hash,
                applied_version=agent.version,
                agent_version="churn",
            )
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await call.write(pb.AgentMessage(hello=hello))
                while True:
                    reading = asyncio.ensure_future(call.read())
                    await asyncio.wait({reading, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    if stopper.done():
                        reading.cancel()
                        return
                    message = reading.result()
                    if message is grpc.aio.EOF:  # type: ignore[attr-defined]
                        break
                    kind = message.WhichOneof("message")
                    if kind == "snapshot":
                        snap = message.snapshot
                        ack = pb.Ack(
                            nonce=message.nonce,
                            version=snap.version,
                            content_hash=snap.content_hash,
                        )
                        await call.write(pb.AgentMessage(ack=ack))
                        agent.hash, agent.version = snap.content_hash, snap.version
                    elif kind == "in_sync":
                        agent.hash = message.in_sync.content_hash
                        agent.version = message.in_sync.version
            except grpc.aio.AioRpcError:
                pass
            finally:
                stopper.cancel()
                call.cancel()
            if not stop.is_set():
                agent.lost += 1
                await asyncio.sleep(0.2)


async def agents_main(target: str, first: int, count: int) -> None:
    loop = asyncio.get_running_loop()
    agents = [SimAgent(agent_name(i)) for i in range(first, first + count)]
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run_agent(a, target, stop)) for a in agents]

    def reply(data: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()

    reply({"started": count})
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if json.loads(line)["op"] == "quit":
            break
        reply(
            {
                "hashes": dict(Counter(a.hash for a in agents)),
                "opened": sum(a.opened for a in agents),
                "lost": sum(a.lost for a in agents),
            }
        )
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------- driver


@dataclass
class LoadFigures:
    agents: int
    churn_seconds: float
    changes: int
    final_version: int = 0
    converge_s: float = 0.0
    streams_opened: int = 0
    streams_lost: int = 0
    agents_on_final: int = 0
    rss_mib_idle: float = 0.0
    rss_mib_connected: float = 0.0
    rss_mib_half_churn: float = 0.0
    rss_mib_after_churn: float = 0.0
    rss_mib_settled: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _kubeconfig(api: FakeKubeAPI, directory: Path) -> Path:
    return write_kubeconfig(api.url, directory / "kubeconfig")


def _cluster(api: FakeKubeAPI, agents: int) -> None:
    api.apply(config_map("haproxy-settings"))
    api.apply(service("shop", source_ip_persistence="true"))
    api.apply(endpoint_slice("shop", endpoints(0)))
    for i in range(agents):
        member = pod(agent_name(i), agent_ip(i), owner="haproxy", owner_kind="DaemonSet")
        api.apply(member)


def _published(address: str) -> pb.Snapshot:
    from peerplane.v1 import peerplane_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
        snap: pb.Snapshot = stub.GetSnapshot(pb.GetSnapshotRequest(workload=WORKLOAD), timeout=10)
        return snap


def _status(workers: list[Child]) -> tuple[Counter[str], int, int]:
    hashes: Counter[str] = Counter()
    opened = lost = 0
    for worker in workers:
        answer = worker.ask({"op": "status"}, timeout=60)
        hashes.update(answer["hashes"])
        opened += answer["opened"]
        lost += answer["lost"]
    return hashes, opened, lost


def shop_endpoints(snap: pb.Snapshot) -> set[str]:
    (shop,) = [b for b in snap.backends if b.name.startswith("default_shop")]
    return {s.address for s in shop.slots if s.enabled}


def _wait_converged(
    serve: ServeProcess, workers: list[Child], agents: int, final: set[str], timeout: float
) -> tuple[pb.Snapshot, Counter[str], int, int]:
    """Until the published model has the API server's final endpoints and every agent
    runs that content (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        snap = _published(serve.address)
        hashes, opened, lost = _status(workers)
        on_final = hashes.get(snap.content_hash, 0)
        if shop_endpoints(snap) == final and on_final == agents:
            return snap, hashes, opened, lost
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{on_final}/{agents} agents on v{snap.version}, model "
                f"{'final' if shop_endpoints(snap) == final else 'not final'} after {timeout:.0f}s"
            )
        time.sleep(0.2)


def ready(step: int) -> set[str]:
    return {ip for ip, ok in endpoints(step).items() if ok}


@contextlib.contextmanager
def _workdir(given: Path | None) -> Iterator[Path]:
    """`given`, or a temporary folder removed at the end (the benchmark passes none)."""
    if given is not None:
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="churn-") as made:
        yield Path(made)


def run_load(
    agents: int,
    seconds: float,
    rate: float,
    workdir: Path | None = None,
    server_args: tuple[str, ...] = (),
) -> LoadFigures:
    """Start everything, churn, measure; every process is stopped by PID at the end.
    `server_args` go to `controlplane serve` after the source's (say, `--leader-elect`
    and the slot ledger, as deployed)."""
    with _workdir(workdir) as work:
        figures = LoadFigures(agents, seconds, 0)
        workers: list[Child] = []
        with FakeKubeAPI() as api:
            _cluster(api, agents)
            kubeconfig = _kubeconfig(api, work)
            args = (
                "--source=kubernetes",
                f"--kubeconfig={kubeconfig}",
                f"--configmap={NS}/haproxy-settings",
                "--max-streams-per-peer=0",
                *server_args,
            )
            with ServeProcess(*args) as serve:
                assert serve.process is not None
                pid = serve.process.pid
                serve.wait_for(re.compile("published "), timeout=60)
                figures.rss_mib_idle = rss_kib(pid) / 1024
                try:
                    per = AGENTS_PER_WORKER
                    for w, first in enumerate(range(0, agents, per)):
                        count = min(per, agents - first)
                        argv = [sys.executable, "-m", "tests.helpers.churn", "agents"]
                        argv += [serve.address, str(first), str(count)]
                        workers.append(Child(argv, work / f"agents-{w}.log"))
                    for worker in workers:
                        worker.read(timeout=60)
                    _wait_converged(serve, workers, agents, ready(0), 120)
                    figures.rss_mib_connected = rss_kib(pid) / 1024

                    step = 0
                    for phase in range(2):  # RSS after each half: a leak keeps growing
                        start, first = time.monotonic(), step
                        while time.monotonic() - start < seconds / 2:
                            step += 1
                            api.apply(endpoint_slice("shop", endpoints(step)))
                            pace = (step - first) / rate - (time.monotonic() - start)
                            time.sleep(max(0.0, pace))
                        churn_end = time.monotonic()
                        snap, hashes, opened, lost = _wait_converged(
                            serve, workers, agents, ready(step), 120
                        )
                        figures.converge_s = max(figures.converge_s, time.monotonic() - churn_end)
                        if phase == 0:
                            figures.rss_mib_half_churn = rss_kib(pid) / 1024
                    figures.changes = step
                    figures.rss_mib_after_churn = rss_kib(pid) / 1024
                    figures.final_version = snap.version
                    figures.agents_on_final = hashes.get(snap.content_hash, 0)
                    figures.streams_opened, figures.streams_lost = opened, lost
                    time.sleep(2.0)  # idle: what the process keeps
                    figures.rss_mib_settled = rss_kib(pid) / 1024
                finally:
                    for worker in workers:
                        if worker.proc.poll() is None:
                            worker.send({"op": "quit"})
                    for worker in workers:
                        worker.stop()
        return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    agents = commands.add_parser("agents")
    agents.add_argument("target")
    agents.add_argument("first", type=int)
    agents.add_argument("count", type=int)
    load = commands.add_parser("load")
    load.add_argument("--agents", type=int, default=200)
    load.add_argument("--seconds", type=float, default=10)
    load.add_argument("--rate", type=float, default=50)
    args = parser.parse_args(argv)
    if args.command == "agents":
        asyncio.run(agents_main(args.target, args.first, args.count))
    else:
        print(json.dumps(run_load(args.agents, args.seconds, args.rate).to_json(), indent=2))


if __name__ == "__main__":
    main()
