"""Scale: one endpoint change in a folder of N Services, full snapshots vs deltas.

For each N (100, 500, 2,000, 8,000; `--quick`: 20, 100) and each mode, a fresh fleet
(`tests.helpers.fleet.Fleet`, octet 41): `controlplane serve --source files:DIR` (no
`--state`, as a first-time user runs it; mode full adds `--no-deltas`) and two `nodeagent
run --manage-haproxy` with real HAProxy (the one on PATH, 2.6), each on its own loopback
address, metrics on loopback. The folder is `scalefolder`'s: one file per Service (the
Service and its EndpointSlice of 20 ready endpoints).

Each sample, after a quiet period, rewrites one Service's file atomically with one
endpoint's address moved (and back on the next sample): the endpoint keeps its slot, so
it stays a runtime-API change (reloads are counted to check it). Measured per change:

- change -> both agents ACK a newer version, polling ListAgents every 10 ms;
- CPU of the control-plane process and of each agent process (utime+stime of
  /proc/PID/stat, all threads) from just before the rename to 0.3 s after the last ACK,
  minus what the same process burns in as long a quiet window while being polled the same
  way (calibrated once per fleet: the ListAgents polls and any idle work, such as the
  folder poll, are not the change's);
- bytes on the wire per agent: the control plane's `peerplane_sent_bytes_total` (all
  kinds) over the change, divided by the agents; "n/a" while the counter does not exist.

Startup is the control-plane process start to both agents having ACKed the first
snapshot. Full mode is slow at large N (tens of seconds per change), so it takes fewer
samples. When `controlplane serve` has no `--no-deltas` the mode cannot be forced and
only the server's default (full snapshots) runs, said in the output.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from nodeagent.haproxy import HAProxy
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Result, log, median, percentile
from tests.bench.scalefolder import (
    MOVED_ADDRESS,
    endpoint_address,
    service_name,
    write_folder,
)
from tests.helpers.fleet import REPO, Fleet, free_port, haproxy_binary, wait_for

OCTET = 41
SIZES = (100, 500, 2000, 8000)
QUICK_SIZES = (20, 100)
HTTP_PORT = 18480
PEER_PORT = 10480
POLL_S = 0.01
QUIET_S = 0.5
SETTLE_S = 0.3
CALIBRATE_S = 2.0
TARGETS = "p50 < 300 ms, p99 < 500 ms, CP CPU < 50 ms, agent CPU < 20 ms, bytes < 2 KB (at 2,000)"
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        after_comm = stat.read().rsplit(")", 1)[1].split()
    return (int(after_comm[11]) + int(after_comm[12])) / _TICKS


def rss_mib(pid: int) -> tuple[float, float]:
    """Resident memory of a process now and at its peak (VmRSS, VmHWM of
    /proc/PID/status), MiB: a container's memory limit must hold the peak."""
    found = {"VmRSS:": float("nan"), "VmHWM:": float("nan")}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key = line.split(maxsplit=1)[0] if line.strip() else ""
            if key in found:
                found[key] = int(line.split()[1]) / 1024
    return found["VmRSS:"], found["VmHWM:"]


def sent_bytes(metrics_url: str) -> dict[str, float] | None:
    """`peerplane_sent_bytes_total` by kind; None when the counter does not exist."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("peerplane_sent_bytes_total"):
            labels, _, value = line.rpartition(" ")
            kind = labels.partition('kind="')[2].partition('"')[0] or "all"
            found[kind] = found.get(kind, 0.0) + float(value)
    return found or None


def server_has_no_deltas_flag() -> bool:
    """Whether `controlplane serve` can force full snapshots (`--no-deltas`)."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    return "--no-deltas" in done.stdout


@dataclass
class Curve:
    """The figures of one (N, mode) run; `error` when it could not finish."""

    services: int
    mode: str
    samples: int
    latencies: list[float] = field(default_factory=list)
    cp_cpu: list[float] = field(default_factory=list)
    agent_cpu: list[float] = field(default_factory=list)  # per agent, per change
    bytes_per_agent: list[float] = field(default_factory=list)
    bytes_kinds: dict[str, float] = field(default_factory=dict)
    startup_s: float = float("nan")
    reloads: int = 0
    agents_on_deltas: int = 0
    idle: dict[str, float] = field(default_factory=dict)
    cp_rss_mib: tuple[float, float] = (float("nan"), float("nan"))  # after the samples, peak
    agent_rss_mib: tuple[float, float] = (float("nan"), float("nan"))  # the larger agent's
    # HAProxy's master and serving worker (the larger of the two instances), now, MiB
    haproxy_rss_mib: tuple[float, float] = (float("nan"), float("nan"))
    error: str = ""


class ScaleFleet:
    """One fleet over a generated folder; every process stopped by `stop()` (by PID)."""

    def __init__(
        self,
        workdir: Path,
        services: int,
        server_args: list[str],
        binary: str | None,
        octet: int = OCTET,
    ) -> None:
        self.services = services
        self.metrics_port = free_port()
        self.pods = (
            (f"haproxy-s{octet}a", f"127.{octet}.1.1"),
            (f"haproxy-s{octet}b", f"127.{octet}.1.2"),
        )
        self.fleet = Fleet(
            workdir,
            octet,
            haproxy_bin=binary,
            server_args=[
                *server_args,
                "--metrics-port",
                str(self.metrics_port),
                "--metrics-address",
                "127.0.0.1",
            ],
            state_file=False,
            serve_timeout=60 + services * 0.03,
        )
        write_folder(self.fleet.manifests, services, self.pods, HTTP_PORT, PEER_PORT)
        self.timeout = 30 + services * 0.03
        self.changed = service_name(services // 2)
        self.addresses = (endpoint_address(services // 2, 0), MOVED_ADDRESS)

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> float:
        """Starts it; seconds from the control plane's start to both agents' first ACK."""
        start = time.perf_counter()
        self.fleet.start_control_plane()
        for name, address in self.pods:
            self.fleet.start_agent(name, address, ["--metrics-port", str(free_port())])
        self.wait_acked(lambda status: True, self.timeout + self.services * 0.02)
        return time.perf_counter() - start

    def stop(self) -> None:
        self.fleet.stop()

    def status(self) -> list[pb.AgentStatus]:
        try:
            return self.fleet.agents_status()
        except grpc.RpcError:
            return []

    def wait_acked(
        self, newer: Callable[[pb.AgentStatus], bool], timeout: float
    ) -> list[pb.AgentStatus]:
        """Until both agents ACKed one same content and `newer(status)` holds for each;
        fails fast when an agent died or logged a gRPC size refusal."""
        found: list[pb.AgentStatus] = []
        checked = [time.monotonic()]

        def done() -> bool:
            status = self.status()
            if time.monotonic() - checked[0] > 1:
                checked[0] = time.monotonic()
                self.check_agents()
            hashes = {s.acked_content_hash for s in status}
            one = len(status) == len(self.pods) and len(hashes) == 1 and "" not in hashes
            if one and all(s.pending_version == 0 and newer(s) for s in status):
                found[:] = status
                return True
            return False

        wait_for(done, timeout, "both agents' ACK", POLL_S)
        return found

    def check_agents(self) -> None:
        for agent in self.fleet.agents.values():
            if agent.process.poll() is not None:
                raise RuntimeError(f"agent {agent.pod_name} exited\n{_tail(agent.log)}")
            text = _tail(agent.log, 40)
            if "RESOURCE_EXHAUSTED" in text or "larger than max" in text:
                raise RuntimeError(f"agent {agent.pod_name}: message too large\n{text}")
        cp = self.fleet.control_plane
        if cp is None or cp.poll() is not None:
            raise RuntimeError(
                f"control plane exited\n{_tail(self.fleet.workdir / 'controlplane.log')}"
            )

    def pids(self) -> tuple[int, list[int]]:
        assert self.fleet.control_plane is not None
        return self.fleet.control_plane.pid, [a.process.pid for a in self.fleet.agents.values()]

    def rss(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """Resident MiB (now, peak) of the control plane and of the agent with the larger
        peak (HAProxy not counted)."""
        cp, agents = self.pids()
        return rss_mib(cp), max((rss_mib(pid) for pid in agents), key=lambda r: r[1])

    def haproxy_rss(self) -> tuple[float, float]:
        """Resident MiB of HAProxy's master and serving worker, the larger instance's."""
        found = []
        for agent in self.fleet.agents.values():
            info = HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc()
            worker = info.current_worker
            master = rss_mib(info.master_pid)[0]
            found.append((master, rss_mib(worker)[0] if worker else float("nan")))
        return max(found, key=lambda r: r[1])

    def cpu(self) -> tuple[float, list[float]]:
        cp, agents = self.pids()
        return cpu_seconds(cp), [cpu_seconds(pid) for pid in agents]

    def reloads(self) -> int:
        return sum(
            HAProxy(str(a.master_socket), str(a.runtime_socket)).show_proc().reloads
            for a in self.fleet.agents.values()
        )

    def idle_rates(self, polling: bool) -> tuple[float, float]:
        """CPU seconds per second of the control plane and of one agent (mean) while
        nothing changes, with ListAgents polled as while waiting for an ACK or not."""
        cp0, agents0 = self.cpu()
        start = time.perf_counter()
        while time.perf_counter() - start < CALIBRATE_S:
            if polling:
                self.status()
            time.sleep(POLL_S)
        cp1, agents1 = self.cpu()
        elapsed = time.perf_counter() - start
        agent = sum(b - a for a, b in zip(agents0, agents1, strict=True)) / len(agents0)
        return (cp1 - cp0) / elapsed, agent / elapsed

    def change(self, sample: int) -> Any:
        """Moves the endpoint (atomic rename); (latency s, window s, CPU before, after)."""
        path = self.fleet.manifests / f"{self.changed}.yaml"
        old, new = self.addresses[sample % 2], self.addresses[(sample + 1) % 2]
        text = path.read_text()
        changed = text.replace(f'"{old}"', f'"{new}"')
        if changed == text:
            raise RuntimeError(f"{path.name}: {old} not found")
        before = min(s.acked_version for s in self.status())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(changed)
        cpu0 = self.cpu()
        start = time.perf_counter()
        os.replace(tmp, path)
        self.wait_acked(lambda s: s.acked_version > before, self.timeout)
        latency = time.perf_counter() - start
        time.sleep(SETTLE_S)
        cpu1 = self.cpu()
        return latency, time.perf_counter() - start, cpu0, cpu1


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def measure(
    services: int,
    mode: str,
    samples: int,
    binary: str | None,
    server_args: list[str],
    octet: int = OCTET,
) -> Curve:
    """One fleet, `samples` changes; the curve point (with `error` set if it failed)."""
    curve = Curve(services, mode, samples)
    work = Path(tempfile.mkdtemp(prefix=f"bench-scale-{services}-{mode}-"))
    fleet = ScaleFleet(work, services, server_args, binary, octet)
    try:
        curve.startup_s = fleet.start()
        curve.agents_on_deltas = sum(1 for s in fleet.status() if s.deltas)
        time.sleep(QUIET_S)
        cp_idle, agent_idle = fleet.idle_rates(polling=False)
        cp_polled, agent_polled = fleet.idle_rates(polling=True)
        curve.idle = {
            "cp_idle_ms_per_s": cp_idle * 1000,
            "cp_polled_ms_per_s": cp_polled * 1000,
            "agent_idle_ms_per_s": agent_idle * 1000,
        }
        reloads0 = fleet.reloads()
        for sample in range(samples):
            time.sleep(QUIET_S)
            sent0 = sent_bytes(fleet.metrics_url)
            latency, window, (cp0, ag0), (cp1, ag1) = fleet.change(sample)
            sent1 = sent_bytes(fleet.metrics_url)
            curve.latencies.append(latency)
            # Not the change's: idle work over the window, the ListAgents polls while
            # waiting for the ACK (calibrated rates; ticks of 10 ms, so means are used).
            curve.cp_cpu.append(cp1 - cp0 - cp_idle * window - (cp_polled - cp_idle) * latency)
            per_agent = sum(b - a for a, b in zip(ag0, ag1, strict=True)) / len(ag0)
            agent_poll = max(0.0, agent_polled - agent_idle)
            curve.agent_cpu.append(per_agent - agent_idle * window - agent_poll * latency)
            if sent0 is not None and sent1 is not None:
                diff = {k: sent1.get(k, 0.0) - sent0.get(k, 0.0) for k in sent1}
                for kind, value in diff.items():
                    curve.bytes_kinds[kind] = curve.bytes_kinds.get(kind, 0.0) + value
                curve.bytes_per_agent.append(sum(diff.values()) / len(fleet.pods))
        curve.reloads = fleet.reloads() - reloads0
        curve.cp_rss_mib, curve.agent_rss_mib = fleet.rss()
        curve.haproxy_rss_mib = fleet.haproxy_rss()
    except Exception as err:  # one size failing must not lose the others
        curve.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        log(f"scale N={services} {mode}: {err}")
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return curve


def samples_for(services: int, mode: str, quick: bool) -> int:
    if quick:
        return 3
    if mode == "delta":
        return 20
    return 10 if services <= 500 else 3


def cpu_mean(values: list[float]) -> float:
    """Mean CPU per change, never below 0 (each sample is a difference of 10 ms ticks
    minus calibrated idle work: single samples are noisy, their mean is not biased)."""
    return max(0.0, statistics.fmean(values)) if values else float("nan")


def _ms(values: list[float], q: float | None = None, mean: bool = False) -> str:
    if not values:
        return "n/a"
    value = cpu_mean(values) if mean else median(values) if q is None else percentile(values, q)
    return f"{value * 1000:,.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"


def _bytes(values: list[float]) -> str:
    if not values:
        return "n/a"
    value = median(values)
    return f"{value / 1024:,.1f} KiB" if value >= 1024 else f"{value:,.0f} B"


def _mib(value: tuple[float, float]) -> str:
    now, peak = value
    return f"{now:,.0f} / {peak:,.0f} MiB" if now == now else "n/a"


def curve_table(curves: list[Curve]) -> str:
    """The curve side by side: one row per (N, mode)."""
    head = (
        "N",
        "mode",
        "p50",
        "p99",
        "CP CPU",
        "agent CPU",
        "bytes/agent",
        "startup",
        "CP RSS / peak",
        "agent RSS / peak",
        "HAProxy master / worker",
        "note",
    )
    rows = []
    for c in curves:
        note = c.error or (
            f"{c.samples} samples, {c.reloads} reloads, {c.agents_on_deltas} agents on deltas"
        )
        if not c.error and c.mode == "delta" and c.bytes_kinds and not c.bytes_kinds.get("delta"):
            note += "; server sent no deltas"
        rows.append(
            (
                f"{c.services:,}",
                c.mode,
                _ms(c.latencies),
                _ms(c.latencies, 99),
                _ms(c.cp_cpu, mean=True),
                _ms(c.agent_cpu, mean=True),
                _bytes(c.bytes_per_agent),
                f"{c.startup_s:.1f} s" if c.startup_s == c.startup_s else "n/a",
                _mib(c.cp_rss_mib),
                _mib(c.agent_rss_mib),
                _mib(c.haproxy_rss_mib),
                note,
            )
        )
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append(
        f"targets: {TARGETS}; CPU: mean per change, bytes: median per change; "
        "RSS after the samples / peak since start (agent: the larger peak of the two, its "
        "HAProxy not counted, nor its `haproxy -c` children); HAProxy: RSS of the master and "
        "the serving worker"
    )
    return "\n".join(lines)


def results_of(curve: Curve, binary: str) -> list[Result]:
    base = f"scale.n{curve.services}.{curve.mode}"
    params: dict[str, Any] = {
        "services": curve.services,
        "endpoints": curve.services * 20,
        "mode": curve.mode,
        "samples": len(curve.latencies),
        "agents": 2,
        "haproxy": binary,
        "reloads": curve.reloads,
        "agents_on_deltas": curve.agents_on_deltas,
        **{k: round(v, 2) for k, v in curve.idle.items()},
    }
    if curve.error:
        return [Result(f"{base}.failed", 1, "run", {**params, "error": curve.error})]
    found = [
        Result(f"{base}.startup_first_ack", curve.startup_s, "s", params),
        Result(f"{base}.change_to_ack_p50", median(curve.latencies) * 1000, "ms", params),
        Result(f"{base}.change_to_ack_p99", percentile(curve.latencies, 99) * 1000, "ms", params),
        Result(f"{base}.cp_cpu_per_change", cpu_mean(curve.cp_cpu) * 1000, "ms", params),
        Result(f"{base}.agent_cpu_per_change", cpu_mean(curve.agent_cpu) * 1000, "ms", params),
        Result(f"{base}.cp_rss", curve.cp_rss_mib[0], "MiB", params),
        Result(f"{base}.cp_rss_peak", curve.cp_rss_mib[1], "MiB", params),
        Result(f"{base}.agent_rss", curve.agent_rss_mib[0], "MiB", params),
        Result(f"{base}.agent_rss_peak", curve.agent_rss_mib[1], "MiB", params),
        Result(f"{base}.haproxy_master_rss", curve.haproxy_rss_mib[0], "MiB", params),
        Result(f"{base}.haproxy_worker_rss", curve.haproxy_rss_mib[1], "MiB", params),
    ]
    if curve.bytes_per_agent:
        kinds = {k: round(v) for k, v in curve.bytes_kinds.items()}
        found.append(
            Result(
                f"{base}.bytes_per_agent_per_change",
                median(curve.bytes_per_agent),
                "bytes",
                {**params, "sent_by_kind_total": kinds},
            )
        )
    return found


def run(
    quick: bool = False,
    sizes: tuple[int, ...] | None = None,
    binary: str | None = None,
    octet: int = OCTET,
    samples: int | None = None,
) -> list[Result]:
    """The curve; the keyword arguments let the smoke test run a small, separate fleet
    (own `octet`, `binary` the HAProxy, default the one on PATH)."""
    binary = binary or haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy not found")
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    # mode -> extra `controlplane serve` arguments
    modes: dict[str, list[str]] = {"full": ["--no-deltas"], "delta": []}
    if not server_has_no_deltas_flag():
        modes = {"full": []}
        log("scale: `controlplane serve` has no --no-deltas: full mode (the default) only")
    curves: list[Curve] = []
    for services in sizes:
        for mode, server_args in modes.items():
            count = samples or samples_for(services, mode, quick)
            log(f"scale: N={services} {mode}, {count} samples")
            curves.append(measure(services, mode, count, binary, server_args, octet))
    print(curve_table(curves))
    if "delta" not in modes:
        print("(no --no-deltas on `controlplane serve`: only full mode was run)")
    results = [r for c in curves for r in results_of(c, binary)]
    failed = [c for c in curves if c.error]
    if failed and len(failed) == len(curves):
        raise RuntimeError(f"every scale run failed: {failed[0].error}")
    return results


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["scale", *sys.argv[1:]]))
