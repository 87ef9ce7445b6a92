"""The shipped memory limits hold the cluster size they are documented for, on every
installed HAProxy (docs/operations.md, "Memory: size the limits to the cluster").

2,000 Services, each with 20 endpoints, the default 42 slots, a host and source-IP
persistence, as one HAProxy instance runs them. HAProxy's memory follows the server slots
(about 6 KiB each), not the traffic: the agent's container must hold the agent plus the
`haproxy -c` it runs before every reload, and the HAProxy container the master plus two
workers, since a reload runs the old worker beside the new one until its connections end
(at most `hard-stop-after`). Measured here, not estimated; the figures are printed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.config.render import RenderOptions, render
from nodeagent.haproxy.driver import HAProxy
from tests.bench.memory import rss_mib
from tests.helpers.fleet import stop_process
from tests.helpers.haproxy_env import backend, free_port, loopback_net, snapshot
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = pytest.mark.haproxy

DAEMONSET = Path(__file__).resolve().parents[2] / "deploy" / "base" / "haproxy.yaml"
SERVICES = 2000
ENDPOINTS = 20
SLOTS = 42  # the `server-slots` default
AGENT_OWN_MIB = 128  # the agent process at 2,000 Services: 81-88 MiB (`tests.bench scale`)
_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}


def mib(quantity: str) -> float:
    """A Kubernetes memory quantity (binary suffixes, as the manifests write them) in MiB."""
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


def memory_limits() -> dict[str, float]:
    """Container name -> memory limit (MiB) of the HAProxy DaemonSet."""
    (daemonset,) = [
        d for d in yaml.safe_load_all(DAEMONSET.read_text()) if d and d["kind"] == "DaemonSet"
    ]
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    return {c["name"]: mib(c["resources"]["limits"]["memory"]) for c in containers}


def big_config(tmp: Path, net: str) -> Path:
    """The config of 2,000 persistent Services with hosts; loopback only, no checks, no
    peer but itself (nothing is sent anywhere)."""
    backends = [
        backend(
            f"default_svc-{i:05d}_http",
            [(f"127.{10 + i // 250}.{i % 250}.{e}", 8080) for e in range(1, ENDPOINTS + 1)],
            count=SLOTS,
        )
        for i in range(SERVICES)
    ]
    routes = [(f"svc-{i:05d}.example.com", b.name) for i, b in enumerate(backends)]
    ip = f"{net}.1"
    snap = snapshot(
        [("haproxy-a", ip, free_port(ip))], backends, http_port=free_port(ip), routes=routes
    )
    options = RenderOptions("haproxy-a", bind_address=ip, runtime_socket=str(tmp / "rt.sock"))
    path = tmp / "haproxy.cfg"
    path.write_text(render(snap, options))
    return path


def check_peak_mib(binary: str, config: Path) -> float:
    """Peak RSS of `haproxy -c` on `config`, measured in a fresh child (whose
    RUSAGE_CHILDREN then holds only that run)."""
    probe = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, binary, "-c", "-q", "-f", str(config)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    code, kib = out.stdout.split()
    assert code == "0", out.stderr
    return int(kib) / 1024


def test_shipped_limits_hold_2000_services_with_default_slots(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    limits = memory_limits()
    config = big_config(tmp_path, loopback_net())
    checked = check_peak_mib(haproxy_bin.path, config)

    master_socket, runtime = tmp_path / "master.sock", tmp_path / "rt.sock"
    process = subprocess.Popen(
        [haproxy_bin.path, "-W", "-S", str(master_socket), "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        hx = HAProxy(str(master_socket), str(runtime), haproxy_bin.path)
        info = hx.wait_running(120)
        worker = info.current_worker
        assert worker is not None
        time.sleep(1)  # let the worker finish its start-up allocations
        master_mib, worker_mib = rss_mib(info.master_pid)[0], rss_mib(worker)[0]
    finally:
        stop_process(process, 30)
    figures = {
        "haproxy": haproxy_bin.version,
        "haproxy -c peak MiB": round(checked),
        "master MiB": round(master_mib),
        "worker MiB": round(worker_mib),
        "limits MiB": limits,
    }
    print(f"\nmemory at {SERVICES} Services x {SLOTS} slots: {json.dumps(figures)}")
    assert AGENT_OWN_MIB + checked <= limits["agent"], figures
    assert master_mib + 2 * worker_mib <= limits["haproxy"], figures
