"""Health checks on real HAProxy: free slots given a pod at runtime are checked, a slot
moved to another pod starts UP, and a pod killed without notice loses its clients to the
other pods within interval x fall while every other client stays where it is."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import classify_snapshots
from tests.helpers.fleet import REPO, http_get
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    loopback_net,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

HOST = "shop.example.com"
BACKEND = "default_shop_http"

# A backend pod as its own process, so the test can SIGKILL it by PID.
_POD = """
import sys
from tests.helpers.fleet import HttpBackend
server = HttpBackend(sys.argv[1], (sys.argv[2], int(sys.argv[3])))
print("ready", flush=True)
server.serve_forever(poll_interval=0.05)
"""


@dataclass
class Pod:
    name: str
    address: str
    port: int
    process: subprocess.Popen[str]


@contextlib.contextmanager
def pod_processes(pods: list[tuple[str, str]]) -> Iterator[dict[str, Pod]]:
    """(name, address) -> a backend process each; every one stopped by PID at the end."""
    started: dict[str, Pod] = {}
    try:
        for name, address in pods:
            port = free_port(address)
            proc = subprocess.Popen(
                [sys.executable, "-c", _POD, name, address, str(port)],
                cwd=REPO,
                stdout=subprocess.PIPE,
                text=True,
            )
            started[name] = Pod(name, address, port, proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield started
    finally:
        for pod in started.values():
            if pod.process.poll() is None:
                pod.process.send_signal(signal.SIGKILL)
            pod.process.wait(10)
            if pod.process.stdout is not None:
                pod.process.stdout.close()


def with_check(b: pb.Backend, interval_ms: int, rise: int, fall: int) -> pb.Backend:
    b.check.CopyFrom(pb.HealthCheck(interval_ms=interval_ms, rise=rise, fall=fall))
    return b


def server_status(inst: Instance) -> dict[str, tuple[str, str]]:
    """SRV_n -> (status, check status) of the shop backend from `show stat`."""
    text = inst.haproxy.runtime("show stat").lstrip("# ")
    rows = csv.DictReader(io.StringIO(text))
    return {
        row["svname"]: (row["status"], row["check_status"])
        for row in rows
        if row["pxname"] == BACKEND and row["svname"].startswith("SRV_")
    }


@contextlib.contextmanager
def instance(tmp: Path, haproxy_bin: HAProxyBinary, ip: str) -> Iterator[Instance]:
    with running_instance(tmp, ip, "pod-a", binary=haproxy_bin.path) as inst:
        serving = haproxy_bin.version_tuple[:2]
        inst.applier.options = replace(inst.applier.options, haproxy_version=serving)
        yield inst


def shop(
    ip: str, ports: tuple[int, int], endpoints: list[tuple[str, int]], version: int, **check: int
) -> pb.Snapshot:
    b = with_check(backend(BACKEND, endpoints, balance="roundrobin"), **check)
    return snapshot(
        [("pod-a", ip, ports[0])],
        [b],
        http_port=ports[1],
        routes=[(HOST, BACKEND)],
        version=version,
    )


@pytest.mark.haproxy
def test_free_slot_given_a_pod_at_runtime_is_checked_from_then_on(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    net = loopback_net()
    ip = f"{net}.1"
    ports = (free_port(ip), free_port(ip))
    check = {"interval_ms": 200, "rise": 2, "fall": 2}
    with pod_processes([("pod-11", f"{net}.11"), ("pod-12", f"{net}.12")]) as pods:
        live = [(pods["pod-11"].address, pods["pod-11"].port)]
        with instance(tmp_path, haproxy_bin, ip) as inst:
            assert inst.applier.apply(shop(ip, ports, live, 1, **check)).ok
            cfg = Path(inst.config_path).read_text()
            assert "  server SRV_2 127.0.0.1:1 id 2 disabled check inter 200 rise 2 fall 2" in cfg
            wait_until(lambda: server_status(inst)["SRV_1"] == ("UP", "L4OK"), 10, "SRV_1 checked")
            # A free slot is in maintenance and never checked.
            assert server_status(inst)["SRV_2"] == ("MAINT", "")

            dead = (f"{net}.21", free_port(f"{net}.21"))  # nobody listens there
            more = [*live, (pods["pod-12"].address, pods["pod-12"].port), dead]
            new = shop(ip, ports, more, 2, **check)
            result = inst.applier.apply(new)
            assert result.ok, result.error
            assert result.kind is ApplyPath.RUNTIME
            # Both start UP (health = rise: one failed check takes a server down) ...
            assert server_status(inst)["SRV_2"][0].startswith("UP")
            # ... and are checked from then on: the dead one goes DOWN, the live one stays.
            wait_until(lambda: server_status(inst)["SRV_3"][0] == "DOWN", 10, "SRV_3 down")
            assert server_status(inst)["SRV_3"][1] == "L4CON"
            wait_until(lambda: server_status(inst)["SRV_2"] == ("UP", "L4OK"), 10, "SRV_2 checked")
            sources = [f"{net}.{150 + i}" for i in range(12)]  # new clients, spread
            served = {http_get(ip, HOST, source=c, port=ports[1]) for c in sources}
            assert served == {"pod-11", "pod-12"}


@pytest.mark.haproxy
def test_slot_moved_to_another_pod_starts_up(tmp_path: Path, haproxy_bin: HAProxyBinary) -> None:
    """Regression: `set server addr` alone left the slot DOWN with the old pod's failed
    checks until `rise` checks passed (here 10 x 300 ms) although the new pod is ready."""
    net = loopback_net()
    ip = f"{net}.1"
    ports = (free_port(ip), free_port(ip))
    check = {"interval_ms": 300, "rise": 10, "fall": 1}
    with pod_processes([("pod-12", f"{net}.12")]) as pods:
        dead = (f"{net}.21", free_port(f"{net}.21"))
        with instance(tmp_path, haproxy_bin, ip) as inst:
            assert inst.applier.apply(shop(ip, ports, [dead], 1, **check)).ok
            wait_until(lambda: server_status(inst)["SRV_1"][0] == "DOWN", 10, "SRV_1 down")
            moved = shop(ip, ports, [(pods["pod-12"].address, pods["pod-12"].port)], 2, **check)
            result = inst.applier.apply(moved)
            assert result.ok, result.error
            assert result.kind is ApplyPath.RUNTIME
            assert server_status(inst)["SRV_1"][0].startswith("UP")
            assert http_get(ip, HOST, port=ports[1]) == "pod-12"


@pytest.mark.unit  # pure
def test_check_settings_change_needs_a_reload() -> None:
    """Checks are declared per server in haproxy.cfg: no runtime command changes them."""
    ports = (10000, 8080)
    old = shop("10.0.0.1", ports, [("10.0.0.11", 80)], 1, interval_ms=2000, rise=2, fall=3)
    opts = RenderOptions("pod-a")
    for field, value in (("interval_ms", 1000), ("rise", 3), ("fall", 5)):
        new = pb.Snapshot()
        new.CopyFrom(old)
        setattr(new.backends[0].check, field, value)
        decision = classify_snapshots(old, new, opts)
        assert decision.kind is ApplyPath.RELOAD, field
    off = pb.Snapshot()
    off.CopyFrom(old)
    off.backends[0].ClearField("check")
    assert classify_snapshots(old, off, opts).kind is ApplyPath.RELOAD
    # A slot change with checks on stays on the runtime path.
    moved = pb.Snapshot()
    moved.CopyFrom(old)
    moved.backends[0].slots[1].CopyFrom(
        pb.Slot(index=2, server_name="SRV_2", address="10.0.0.12", port=80, enabled=True)
    )
    assert classify_snapshots(old, moved, opts).kind is ApplyPath.RUNTIME


@dataclass
class Sample:
    at: float  # seconds since the kill (negative: before)
    client: str
    pod: str | None  # None: the request failed
    seconds: float


@pytest.mark.haproxy
def test_sigkilled_pod_loses_its_clients_within_interval_x_fall(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """SIGKILL a backend pod without touching its endpoints: only its clients move, once,
    and requests fail (if at all) only before HAProxy marks it DOWN."""
    net = loopback_net()
    ip = f"{net}.1"
    ports = (free_port(ip), free_port(ip))
    interval_ms, rise, fall = 500, 2, 3
    window = interval_ms * fall / 1000
    names = ["pod-11", "pod-12", "pod-13"]
    clients = [f"{net}.{100 + i}" for i in range(30)]
    with pod_processes([(n, f"{net}.{n[-2:]}") for n in names]) as pods:
        endpoints = [(pods[n].address, pods[n].port) for n in names]
        with instance(tmp_path, haproxy_bin, ip) as inst:
            snap = shop(ip, ports, endpoints, 1, interval_ms=interval_ms, rise=rise, fall=fall)
            assert inst.applier.apply(snap).ok
            wait_until(
                lambda: all(s == ("UP", "L4OK") for s in list(server_status(inst).values())[:3]),
                10,
                "servers checked",
            )
            home = {c: http_get(ip, HOST, source=c, port=ports[1]) for c in clients}
            assert set(home.values()) == set(names)  # roundrobin spread them
            victim = "pod-11"
            victims = {c for c, p in home.items() if p == victim}

            samples: list[Sample] = []
            stop = threading.Event()
            killed_at = [0.0]

            def loop(mine: list[str]) -> None:
                while not stop.is_set():
                    for c in mine:
                        start = time.monotonic()
                        try:
                            pod: str | None = http_get(
                                ip, HOST, source=c, port=ports[1], timeout=15
                            )
                        except Exception:
                            pod = None
                        end = time.monotonic()
                        at = end - killed_at[0] if killed_at[0] else start - end - 1
                        samples.append(Sample(at, c, pod, end - start))

            threads = [threading.Thread(target=loop, args=(clients[i::3],)) for i in range(3)]
            for t in threads:
                t.start()
            try:
                time.sleep(0.5)
                killed_at[0] = time.monotonic()
                os.kill(pods[victim].process.pid, signal.SIGKILL)
                down_at: float | None = None
                while time.monotonic() - killed_at[0] < window + 10:
                    if server_status(inst)["SRV_1"][0] == "DOWN":
                        down_at = time.monotonic() - killed_at[0]
                        break
                    time.sleep(0.01)
                assert down_at is not None, "the killed pod was never marked DOWN"
                time.sleep(window + 1.0)
            finally:
                stop.set()
                for t in threads:
                    t.join(30)

    failed = [s for s in samples if s.pod is None]
    in_window = [s for s in samples if 0 <= s.at <= down_at + 0.05]
    after = [s for s in samples if s.at > down_at + 0.05]
    slowest = max((s.seconds for s in in_window), default=0.0)
    print(
        f"\nHAProxy {haproxy_bin.version}: check inter {interval_ms}ms fall {fall} "
        f"(window {window:.1f}s); killed pod marked DOWN after {down_at:.3f}s; "
        f"{len(samples)} requests from {len(clients)} clients ({len(victims)} on the killed "
        f"pod): {len(failed)} failed, {len(in_window)} answered while it was still UP "
        f"(slowest {slowest:.3f}s, retries + redispatch), {len(after)} after"
    )
    # HAProxy checks every `inter`: the pod is DOWN after `fall` failed checks, within
    # interval x fall of the kill (the margin covers one check's scheduling).
    assert down_at <= window + interval_ms / 1000
    # Requests fail only inside that window: retries and `option redispatch` cover it.
    assert all(0 <= s.at <= down_at + 0.05 for s in failed), failed
    # After it: every client of the killed pod sticks to one other pod; every other
    # client never left its own.
    for c in clients:
        before = {s.pod for s in samples if s.client == c and s.at < 0}
        late = {s.pod for s in after if s.client == c}
        assert late, c
        if c in victims:
            assert before <= {victim}
            assert len(late) == 1 and victim not in late, (c, late)
        else:
            seen = {s.pod for s in samples if s.client == c}
            assert seen == {home[c]}, (c, seen)
