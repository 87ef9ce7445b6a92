"""Shared pieces of the benchmarks: results, machine facts, the synthetic cluster, stats."""

from __future__ import annotations

import json
import math
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlplane.model import ClusterState
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service

RESULTS_PATH = Path(__file__).resolve().parent / "results.json"
ENDPOINTS_PER_SERVICE = 20
HAPROXY_PODS = 50
WORKLOAD = "haproxy-system/DaemonSet/haproxy"


def machine() -> dict[str, Any]:
    """What every figure is qualified by: the cores this process may use and Python."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cores": cores, "python": platform.python_version()}


@dataclass(frozen=True, slots=True)
class Result:
    """One figure: written to results.json and printed as one table row."""

    name: str
    value: float
    unit: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "parameters": self.parameters,
            "machine": machine(),
        }


def fmt_value(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.4g}"


def write_results(results: Sequence[Result], path: Path = RESULTS_PATH) -> None:
    """Write (replace) results.json; entries of other benchmarks already there are kept."""
    kept: list[dict[str, Any]] = []
    names = {r.name for r in results}
    if path.exists():
        try:
            old = json.loads(path.read_text())
            kept = [e for e in old if isinstance(e, dict) and e.get("name") not in names]
        except (ValueError, OSError):
            kept = []
    path.write_text(json.dumps([*kept, *(r.to_json() for r in results)], indent=2) + "\n")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): the smallest value at least q% of the
    sample is at or below, the ceil(q/100 * n)-th in order (of 100, the p99 is the 99th,
    one value above it; of 20, the largest)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(q * len(ordered) / 100 - 1e-9)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def best_of(fn: Callable[[], object], repeat: int) -> tuple[float, list[float]]:
    """Minimum and all wall times (seconds) of `repeat` calls: the minimum is the least
    noisy estimate on a shared machine."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), times


@contextmanager
def deadline(seconds: float, what: str) -> Iterator[Callable[[], float]]:
    """A context giving the seconds left; raises TimeoutError when asked past the end."""
    end = time.monotonic() + seconds

    def left() -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what}: no result within {seconds:.0f}s")
        return remaining

    yield left


def loopback_ip(index: int, base: int = 0x7F_10_00_00) -> str:
    """127.16.0.0 + index: every simulated pod gets its own loopback address."""
    value = base + index
    return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"


def big_cluster(services: int, endpoints_per_service: int = ENDPOINTS_PER_SERVICE) -> ClusterState:
    """`services` opted-in Services with `endpoints_per_service` ready endpoints each (one
    EndpointSlice per Service) and one DaemonSet of 50 HAProxy pods."""
    svcs = []
    slices = []
    for s in range(services):
        name = f"svc-{s:06d}"
        svcs.append(service(name, annotations={"haproxy.org/source-ip-persistence": "true"}))
        addresses = [
            loopback_ip(s * endpoints_per_service + e) for e in range(endpoints_per_service)
        ]
        slices.append(endpoint_slice(name, addresses))
    pods = [
        haproxy_pod(f"haproxy-{p:03d}", loopback_ip(p, base=0x7F_01_00_00))
        for p in range(HAPROXY_PODS)
    ]
    return cluster(svcs, slices, pods)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def work_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder for one measurement's logs and data (a real API server's etcd:
    tens of MB): removed when the block ends, kept and named when it raises (its logs say
    why)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except BaseException:
        log(f"logs kept in {path}")
        raise
    shutil.rmtree(path, ignore_errors=True)


class Child:
    """A helper process spoken to in JSON lines over stdin/stdout; stderr goes to a file.

    Every wait is bounded; `stop()` ends it by PID (terminate, then kill).
    """

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def read(self, timeout: float) -> dict[str, Any]:
        """The next JSON line; TimeoutError or RuntimeError (with the log tail) otherwise."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer within {timeout:.0f}s\n{self.tail()}") from None
        if line is None:
            raise RuntimeError(f"helper exited ({self.proc.poll()})\n{self.tail()}")
        data: dict[str, Any] = json.loads(line)
        return data

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def ask(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(command)
        return self.read(timeout)

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()


def rss_kib(pid: int | str = "self") -> int:
    """Resident set size of a process, from /proc."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
