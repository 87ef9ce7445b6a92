"""Agent CPU per one-endpoint change, full snapshot vs delta, at 2,000 and 8,000 Services
x 20 endpoints, each Service exposed with its own host (2,000 / 8,000 HTTP routes), in one
run.

`python -m tests.bench.agent_apply [--quick] [--no-hosts]`. Measured with
`time.process_time` (this process's CPU, every thread) around what the agent does per
change: parse the ServerMessage bytes, materialize (a full snapshot into held parts, or a
delta applied to the held snapshot and its hash verified), then `Applier.apply` (render
cache, classify, runtime API `set server`, the config file and the saved snapshot written).
HAProxy's own CPU is not counted (another process).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from controlplane.compute import Computer
from controlplane.model import ClusterState, frozen_map
from controlplane.publish import Encoder
from nodeagent.apply.saved import atomic_write
from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.held import Held, diff
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Result, big_cluster, log
from tests.bench.compute import with_one_endpoint_changed
from tests.helpers.builders import settings
from tests.helpers.deltas import WORKLOAD, delta_between, hashed
from tests.helpers.haproxy_env import free_port, loopback_net, make_instance
from tests.helpers.haproxy_versions import SYSTEM_BINARY

POD = "haproxy-000"


def with_hosts(state: ClusterState) -> ClusterState:
    """Each Service exposed with its own host, as the scale bench's folder does."""
    svcs = tuple(
        dataclasses.replace(
            s,
            annotations=frozen_map({**s.annotations, "haproxy.org/hosts": f"{s.name}.example.com"}),
        )
        for s in state.services
    )
    return dataclasses.replace(state, services=svcs)


def versions(
    services: int, config: dict[str, str] | None = None, hosts: bool = True
) -> tuple[pb.Snapshot, pb.Snapshot]:
    """Two versions of the big cluster's snapshot that differ in one endpoint."""
    base = big_cluster(services)
    if hosts:
        base = with_hosts(base)
    if config:
        base = dataclasses.replace(base, settings=settings(**config))
    computer, encoder = Computer(), Encoder()
    first = computer.compute(base, {})
    v1 = encoder.encode(first.workloads)[WORKLOAD].message(1)
    changed = with_one_endpoint_changed(base, services // 2, True)
    second = computer.compute(changed, first.assignment)
    v2 = encoder.encode(second.workloads)[WORKLOAD].message(2)
    if hosts and len(v1.http_frontend.routes) != services:
        raise RuntimeError(f"{len(v1.http_frontend.routes)} routes for {services} Services")
    return v1, v2


def _local_peers(snap: pb.Snapshot, ip: str, port: int) -> pb.Snapshot:
    """Only this pod as peer, on a private loopback address (no other pod is up)."""
    snap.peers.ClearField("peers")
    snap.peers.peers.add(name=POD, address=ip, port=port)
    snap.peers.port = port
    return hashed(snap)


def _ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms (min {min(values) * 1000:.1f})"


def measure(
    services: int, changes: int, config: dict[str, str] | None = None, hosts: bool = True
) -> list[Result]:
    """Through `Applier.apply` and a real HAProxy (runtime path)."""
    v1, v2 = versions(services, config, hosts)
    net = loopback_net()
    ip = f"{net}.1"
    peer_port = free_port(ip)
    v1, v2 = _local_peers(v1, ip, peer_port), _local_peers(v2, ip, peer_port)
    size = len(v1.SerializeToString())
    full_msgs = [
        pb.ServerMessage(nonce=str(i), snapshot=s).SerializeToString()
        for i, s in enumerate((v1, v2))
    ]
    deltas = [
        pb.ServerMessage(nonce="d1", delta=delta_between(v1, v2)).SerializeToString(),
        pb.ServerMessage(nonce="d2", delta=delta_between(v2, v1)).SerializeToString(),
    ]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        inst = make_instance(Path(tmp), ip, POD, binary=SYSTEM_BINARY)
        inst.applier.options = type(inst.applier.options)(
            POD, bind_address=ip, runtime_socket=inst.haproxy.runtime_socket
        )
        inst.applier.start_timeout = 300.0  # 84,000 servers: HAProxy starts slowly
        applier = inst.applier
        try:
            first = applier.apply(Held.from_snapshot(v1))
            if not first.ok:
                raise RuntimeError(first.error)
            full = times.setdefault("full", [])
            for _ in range(changes):
                applied = applier.applied_held
                assert applied is not None
                start = time.process_time()
                msg = pb.ServerMessage.FromString(
                    full_msgs[applied.content_hash == v1.content_hash]
                )
                result = applier.apply(Held.from_snapshot(msg.snapshot))
                full.append(time.process_time() - start)
                if result.kind is not ApplyPath.RUNTIME:
                    raise RuntimeError(f"full: {result}")
            delta = times.setdefault("delta", [])
            for _ in range(changes):
                start = time.process_time()
                base = applier.applied_held
                assert base is not None
                msg = pb.ServerMessage.FromString(deltas[base.content_hash != v1.content_hash])
                held, change = base.apply(msg.delta)
                result = applier.apply(held, change)
                delta.append(time.process_time() - start)
                if result.kind is not ApplyPath.RUNTIME:
                    raise RuntimeError(f"delta: {result}")
        finally:
            inst.supervisor.stop()
    results = []
    for kind, values in times.items():
        log(
            f"{kind} {_ms(values)} agent CPU per one-endpoint change through "
            f"Applier.apply, real HAProxy runtime path, {services} Services x 20 endpoints, "
            f"{services if hosts else 0} host routes, {size} snapshot bytes, "
            f"{len(deltas[0])} delta bytes"
        )
        params = {
            "services": services,
            "endpoints": 20,
            "hosts": hosts,
            "snapshot_bytes": size,
            "changes": changes,
            "settings": config or {},
            "haproxy": "real, runtime path",
        }
        name = f"agent.cpu_per_change.{kind}"
        results.append(Result(name, statistics.median(values) * 1000, "ms", params))
    return results


STEPS = ("parse", "materialize", "render", "classify", "data", "write_cfg", "save")


def measure_without_haproxy(services: int, changes: int, hosts: bool = True) -> list[Result]:
    """Default settings (2 MB snapshots at 2,000 Services, 84,000 slots with checks: a real
    HAProxy needs ~92,000 file descriptors, above this machine's limit of 20,000):
    everything the applier does on the runtime path but the socket I/O, by the same
    functions: parse, materialize, render cache, classify, the config file and the saved
    snapshot written atomically. Timed step by step."""
    v1, v2 = versions(services, hosts=hosts)
    size = len(v1.SerializeToString())
    opts = RenderOptions(POD, bind_address="127.0.0.1")
    msgs = {
        "full": [pb.ServerMessage(snapshot=s).SerializeToString() for s in (v2, v1)],
        "delta": [
            pb.ServerMessage(delta=delta_between(v1, v2)).SerializeToString(),
            pb.ServerMessage(delta=delta_between(v2, v1)).SerializeToString(),
        ],
    }
    results = []
    cfg_bytes = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind, pair in msgs.items():
            held = Held.from_snapshot(v1)
            rendered = render_held(held, opts)
            steps: dict[str, list[float]] = {s: [] for s in STEPS}
            totals: list[float] = []
            for i in range(changes):
                t0 = time.process_time()
                msg = pb.ServerMessage.FromString(pair[i % 2])
                t1 = time.process_time()
                if kind == "full":
                    new = Held.from_snapshot(msg.snapshot)
                    change = diff(held, new)
                else:
                    new, change = held.apply(msg.delta)
                t2 = time.process_time()
                new_r = render_held(new, opts, rendered, change)
                t3 = time.process_time()
                decision = classify(held, rendered, new, new_r, change)
                t4 = time.process_time()
                data = new_r.data()
                t5 = time.process_time()
                atomic_write(f"{tmp}/haproxy.cfg", data)
                t6 = time.process_time()
                atomic_write(f"{tmp}/snapshot.binpb", new.serialized())
                t7 = time.process_time()
                marks = (t0, t1, t2, t3, t4, t5, t6, t7)
                for name, a, b in zip(STEPS, marks, marks[1:], strict=False):
                    steps[name].append(b - a)
                totals.append(t7 - t0)
                cfg_bytes = len(data)
                if decision.kind is not ApplyPath.RUNTIME:
                    raise RuntimeError(f"{kind}: {decision}")
                held, rendered = new, new_r
            if rendered.data() != render_held(held, opts).data():
                raise RuntimeError("the cached rendering differs from a fresh one")
            by_step = ", ".join(
                f"{name} {statistics.median(steps[name]) * 1000:.1f}" for name in STEPS
            )
            log(
                f"{kind} {_ms(totals)} agent CPU per one-endpoint change, "
                f"{services} Services x 20 endpoints, {services if hosts else 0} host "
                f"routes, {size} snapshot bytes, {cfg_bytes} config bytes, "
                f"{len(pair[0])} message bytes, no socket I/O; by step (ms, medians): "
                f"{by_step}"
            )
            params = {
                "services": services,
                "hosts": hosts,
                "snapshot_bytes": size,
                "config_bytes": cfg_bytes,
                "haproxy": "none",
                "steps_ms": {n: round(statistics.median(v) * 1000, 2) for n, v in steps.items()},
            }
            ms = statistics.median(totals) * 1000
            results.append(Result(f"agent.cpu_per_change_no_io.{kind}", ms, "ms", params))
    return results


# 2,000 x 20 endpoints fit a real HAProxy here only with 21 slots (one free: the moved
# endpoint's) and no checks (FD limit).
SMALL_SLOTS = {"server-slots": "21", "check": "false"}


# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {"agent.cpu_per_change.delta": "< 20 ms at 2,000 Services"}


def run(quick: bool = False, hosts: bool = True) -> list[Result]:
    sizes, changes = ((200,), 5) if quick else ((2000, 8000), 20)
    results: list[Result] = []
    for services in sizes:
        results += measure_without_haproxy(services, changes, hosts)
    for services in sizes:
        results += measure(services, changes, SMALL_SLOTS, hosts)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--no-hosts", dest="hosts", action="store_false", help="Services without hosts"
    )
    args = parser.parse_args()
    for r in run(args.quick, args.hosts):
        print(f"{r.name} {r.value:.1f} {r.unit} {r.parameters}")


if __name__ == "__main__":
    main()
