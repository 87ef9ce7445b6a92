"""Agent CPU per one-endpoint change, full snapshot vs delta, at 2,000 Services x 20
endpoints, with a real HAProxy on the runtime path.

`python -m tests.bench.agent_apply [--quick]`. Measured with `time.process_time` (this
process's CPU, every thread) around what the agent does per change: parse the
ServerMessage bytes, materialize (a full snapshot into held parts, or a delta applied to
the held snapshot and its hash verified), then `Applier.apply` (render cache, classify,
runtime API `set server`, the config file and the saved snapshot written). HAProxy's own
CPU is not counted (another process).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from controlplane.compute import Computer
from controlplane.publish import Encoder
from nodeagent.changes import Kind, classify
from nodeagent.delta import Held, diff
from nodeagent.render import RenderOptions, render_held
from nodeagent.state import atomic_write
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Result, big_cluster, log
from tests.bench.compute import with_one_endpoint_changed
from tests.helpers.builders import settings
from tests.helpers.deltas import WORKLOAD, delta_between, hashed
from tests.helpers.haproxy_env import free_port, loopback_net, make_instance
from tests.helpers.haproxy_versions import SYSTEM_BINARY

POD = "haproxy-000"


def versions(
    services: int, config: dict[str, str] | None = None
) -> tuple[pb.Snapshot, pb.Snapshot]:
    """Two versions of the big cluster's snapshot that differ in one endpoint."""
    base = big_cluster(services)
    if config:
        base = dataclasses.replace(base, settings=settings(**config))
    computer, encoder = Computer(), Encoder()
    first = computer.compute(base, {})
    v1 = encoder.encode(first.workloads)[WORKLOAD].message(1)
    changed = with_one_endpoint_changed(base, services // 2, True)
    second = computer.compute(changed, first.assignment)
    v2 = encoder.encode(second.workloads)[WORKLOAD].message(2)
    return v1, v2


def _local_peers(snap: pb.Snapshot, ip: str, port: int) -> pb.Snapshot:
    """Only this pod as peer, on a private loopback address (no other pod is up)."""
    snap.peers.ClearField("peers")
    snap.peers.peers.add(name=POD, address=ip, port=port)
    snap.peers.port = port
    return hashed(snap)


def measure(services: int, changes: int, config: dict[str, str] | None = None) -> list[Result]:
    """Through `Applier.apply` and a real HAProxy (runtime path)."""
    v1, v2 = versions(services, config)
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
    with tempfile.TemporaryDirectory() as tmp:
        inst = make_instance(Path(tmp), ip, POD, binary=SYSTEM_BINARY)
        inst.applier.options = type(inst.applier.options)(
            POD, bind_address=ip, runtime_socket=inst.haproxy.runtime_socket
        )
        inst.applier.start_timeout = 300.0  # 84,000 servers: HAProxy starts slowly
        try:
            first = inst.applier.apply(Held.from_snapshot(v1))
            if not first.ok:
                raise RuntimeError(first.error)
            full: list[float] = []
            delta: list[float] = []
            for i in range(changes):
                start = time.process_time()
                msg = pb.ServerMessage.FromString(full_msgs[(i + 1) % 2])
                result = inst.applier.apply(Held.from_snapshot(msg.snapshot))
                full.append(time.process_time() - start)
                if result.kind is not Kind.RUNTIME:
                    raise RuntimeError(f"full: {result}")
            for _ in range(changes):
                start = time.process_time()
                base = inst.applier.applied_held
                assert base is not None
                msg = pb.ServerMessage.FromString(deltas[base.content_hash != v1.content_hash])
                held, change = base.apply(msg.delta)
                result = inst.applier.apply(held, change)
                delta.append(time.process_time() - start)
                if result.kind is not Kind.RUNTIME:
                    raise RuntimeError(f"delta: {result}")
        finally:
            inst.supervisor.stop()
    params = {
        "services": services,
        "endpoints": 20,
        "snapshot_bytes": size,
        "changes": changes,
        "settings": config or {},
        "haproxy": "real, runtime path",
    }
    full_ms, delta_ms = statistics.median(full) * 1000, statistics.median(delta) * 1000
    log(
        f"agent CPU per one-endpoint change at {services} Services x 20 endpoints "
        f"({size} snapshot bytes, {len(deltas[0])} delta bytes): full snapshot median "
        f"{full_ms:.1f} ms (min {min(full) * 1000:.1f}), delta median {delta_ms:.1f} ms "
        f"(min {min(delta) * 1000:.1f}), x{full_ms / delta_ms:.1f}"
    )
    return [
        Result("agent.cpu_per_change.full", full_ms, "ms", params),
        Result("agent.cpu_per_change.delta", delta_ms, "ms", params),
    ]


def measure_without_haproxy(services: int, changes: int) -> list[Result]:
    """Default settings (2 MB snapshots, 84,000 slots with checks: a real HAProxy needs
    ~92,000 file descriptors, above this machine's limit of 20,000): everything the applier
    does on the runtime path but the socket I/O, by the same functions: parse, materialize,
    render cache, classify, the config file and the saved snapshot written atomically."""
    v1, v2 = versions(services)
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
    with tempfile.TemporaryDirectory() as tmp:
        for kind, pair in msgs.items():
            held = Held.from_snapshot(v1)
            rendered = render_held(held, opts)
            times = []
            for i in range(changes):
                start = time.process_time()
                msg = pb.ServerMessage.FromString(pair[i % 2])
                if kind == "full":
                    new = Held.from_snapshot(msg.snapshot)
                    change = diff(held, new)
                else:
                    new, change = held.apply(msg.delta)
                new_r = render_held(new, opts, rendered)
                decision = classify(held, rendered, new, new_r, change)
                atomic_write(f"{tmp}/haproxy.cfg", new_r.data())
                atomic_write(f"{tmp}/snapshot.binpb", new.serialized())
                times.append(time.process_time() - start)
                if decision.kind is not Kind.RUNTIME:
                    raise RuntimeError(f"{kind}: {decision}")
                held, rendered = new, new_r
            ms = statistics.median(times) * 1000
            log(
                f"{kind}: {ms:.1f} ms median (min {min(times) * 1000:.1f}) agent CPU per "
                f"one-endpoint change, {services} Services x 20 endpoints, {size} snapshot "
                f"bytes, {len(pair[0])} message bytes, no socket I/O"
            )
            params = {"services": services, "snapshot_bytes": size, "haproxy": "none"}
            results.append(Result(f"agent.cpu_per_change_no_io.{kind}", ms, "ms", params))
    return results


# 2,000 x 20 endpoints fit a real HAProxy here only with 21 slots (one free: the moved
# endpoint's) and no checks (FD limit).
SMALL_SLOTS = {"server-slots": "21", "check": "false"}


def run(quick: bool = False) -> list[Result]:
    services, changes = (200, 5) if quick else (2000, 20)
    return [
        *measure_without_haproxy(services, changes),
        *measure(services, changes, SMALL_SLOTS),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    for r in run(parser.parse_args().quick):
        print(f"{r.name} {r.value:.1f} {r.unit} {r.parameters}")


if __name__ == "__main__":
    main()
