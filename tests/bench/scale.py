"""Scale: one endpoint change among N Services, by where the slot ledger persists (and
full snapshots vs deltas).

For each N (100, 2,000, 8,000; `--quick`: 100, 300) and each mode, a fresh fleet
(`tests.helpers.fleet.Fleet`, octet 41): `controlplane serve` and two `nodeagent run
--manage-haproxy` with real HAProxy (the one on PATH, 2.6), each on its own loopback
address, metrics on loopback. The modes (`MODES`; the default run takes `DEFAULT_MODES`,
all with deltas, the server's default):

- delta: `--source files:DIR`, no `--state` (slots not persisted, as a first-time user
  runs it);
- state: the same with `--state FILE`, the SQLite ledger (one row per backend);
- kube: `--source kubernetes --leader-elect` against the fake API server
  (`scalekube`, in its own process) holding the same cluster as objects: the ledger is
  one ConfigMap shard per backend, all created by the leader at its first start;
- kube-real: the same against a real API server (`realapi`: tests/cluster/up's etcd,
  kube-apiserver and controller manager, deploy/ installed, `serve` under the shipped
  RBAC with a TokenRequest token of its ServiceAccount); the Services and EndpointSlices
  are written by the benchmark as the admin, `realapi.WRITERS` requests at a time, their
  endpoints moved to 10.80.0.0/14 (and the moved one to 10.90.0.1), prefixes routed into a
  network namespace of the run's own where they are local: health checks are refused
  there, nothing leaves the machine. Root only, and the cluster's binaries (built or
  buildable): else left out with a line saying why. A new cluster for each fleet;
- full: as delta with `--no-deltas` (run only when asked, `run(modes=...)`).

The cluster is `scalefolder`'s: N Services each with one EndpointSlice of 20 ready
endpoints (the folder holds one file per Service).

Health checks: every mode first runs with the default settings, checks on (what users
run), then with `check: "false"` beside it (mode name `-nochecks`): the full run does so
for every mode, `--quick` for delta only; the ratios on/off of p50, CPU, HAProxy's idle
CPU and memory are figures of their own. With checks on HAProxy needs a descriptor per
checked server (all 42 slots of every backend) on top of 2 x maxconn: past about 280
Services that is more than an open-files limit of 20,000. The agent counts it as HAProxy
does and NACKs the config with the figures (HAProxy itself would say "Cannot raise FD
limit to N"; either is caught). That is a row (`refused`, `fd_needed`, the words), not a
crash; the other modes skip checks on at that N (the same config would be refused) and
all run with checks off.

Each sample, after a quiet period, moves one endpoint's address (and back on the next
sample): the folder's file is rewritten atomically, or the EndpointSlice replaced in the
API. The endpoint keeps its slot, so it stays a runtime-API change (reloads are counted
to check it). Measured per change:

- change -> both agents ACK a newer version: the benchmark reads the agents' log files as
  they grow (every 5 ms) for their `ACK ... version=N` lines, so waiting costs the control
  plane nothing (it used to poll ListAgents every 10 ms, whose cost then had to be
  subtracted). After the window ListAgents checks that both agents ACKed one content with
  nothing pending (else the sample waits for it and counts as `unsettled`);
- CPU of the control-plane process and of each agent process from just before the rename
  (or the API write) to `SETTLE_S` after the last ACK line (the ACK's handling and the
  report each agent sends after its apply fall in it): the run time of every thread
  (/proc/PID/task/TID/schedstat, nanoseconds; utime+stime of /proc/PID/stat, in 10 ms
  ticks, only when a thread ended inside the window). Then, after a quiet period, an idle
  window of the same length with nothing changed and nothing polled, read the same way.
  CPU per change is the change's window minus its idle window: what runs on a timer (the
  folder's safety rescan every 10 s, the agents' periodic reports, the Lease renewals)
  falls into either window with the same chance and cancels out in the mean. The median
  of those differences is the column (a timer's pass that fell into one window of 20 does
  not move it); the mean is a figure too. The idle windows' CPU per second is the
  periodic work, shown apart (`CP idle`, with the idle calibration before the samples:
  `CALIBRATE_S`, as long as the rescan's period);
- bytes on the wire per agent: the control plane's `peerplane_sent_bytes_total` (all
  kinds) over the change, divided by the agents; "n/a" while the counter does not exist;
- bytes written, metered outside the control plane: to the API (kube only, "n/a" for
  kube-real: the real server is not metered), the request bodies the
  fake API server received for ConfigMaps (the ledger's shards; Lease renewals and Events
  are counted apart); to the disk, `write_bytes` of /proc/PID/io of the control plane
  (pages it dirtied: the SQLite ledger and its WAL, and its log file);
- the largest ledger object after the samples: the largest shard's data bytes in the API,
  or the SQLite file's size (its largest row and the WAL beside it in the note).

Startup is the control-plane process start to both agents having ACKed the first
snapshot, and to both having ACKed a content with every endpoint in an enabled slot (the
"all" figure, `startup_all_endpoints_ack`: with the kube ledger the first snapshot may
come before the leader wrote every shard, the slots filling in later versions); the
samples start after the second. Full mode is slow at large N,
so it takes fewer samples. When `controlplane serve` has no `--no-deltas` the mode cannot
be forced and only the server's default (full snapshots) runs, said in the output.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import sqlite3
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

from nodeagent.haproxy.driver import HAProxy
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.bench import realapi
from tests.bench.common import Result, log, median, percentile
from tests.bench.memory import rss_mib
from tests.bench.scalefolder import (
    ENDPOINTS,
    MOVED_ADDRESS,
    cluster_objects,
    endpoint_address,
    service_name,
    slice_name,
    write_folder,
)
from tests.bench.scalekube import LEDGER, NAMESPACE, KubeCluster
from tests.helpers.fleet import REPO, WORKLOAD, Fleet, free_port, haproxy_binary
from tests.helpers.waiting import wait_until
from tests.kubeapi.objects import write_kubeconfig

OCTET = 41
SIZES = (100, 2000, 8000)
QUICK_SIZES = (100, 300)  # 300: past the descriptor limit with checks on
HTTP_PORT = 18480
PEER_PORT = 10480
POLL_S = 0.01
LOG_POLL_S = 0.005  # reading the agents' logs for their ACK lines
QUIET_S = 0.5
SETTLE_S = 0.3
CALIBRATE_S = 10.0  # the folder's safety rescan runs every 10 s: once in this window
TARGETS_TEXT = (
    "at 2,000 and 8,000: p50 < 100 ms, CP CPU < 10 ms (issue 33), written < 16 KiB to the API "
    "(< 64 KiB to disk) per change, largest ledger object < 64 KiB"
)
TARGET_FROM = 2000  # the targets apply from this many Services
TARGET_P50_S = 0.100
TARGET_CP_CPU_S = 0.010
TARGET_API_BYTES = 16 * 1024
TARGET_DISK_BYTES = 64 * 1024
TARGET_OBJECT_BYTES = 64 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")
SNAPSHOT_LIMIT = 256 * 1024 * 1024  # GetSnapshot of 8,000 backends passes gRPC's 4 MiB


@dataclass(frozen=True, slots=True)
class Mode:
    """How the control plane runs: snapshots or deltas, and where its ledger lives."""

    name: str
    deltas: bool
    ledger: str  # "none", "files" (--state, SQLite) or "kube" (ConfigMap shards)
    real: bool = False  # kube: a real API server (`realapi`) instead of the fake one


MODES = {
    "full": Mode("full", deltas=False, ledger="none"),
    "delta": Mode("delta", deltas=True, ledger="none"),
    "state": Mode("state", deltas=True, ledger="files"),
    "kube": Mode("kube", deltas=True, ledger="kube"),
    "kube-real": Mode("kube-real", deltas=True, ledger="kube", real=True),
}
DEFAULT_MODES = ("delta", "state", "kube", "kube-real")
# kube-real's endpoints: 10.80.0.0 + index (scalefolder's 127.80.x off loopback) and the
# moved one, routed into the run's network namespace (its veth pair's own two addresses)
REAL_PREFIXES = ["10.80.0.0/14", "10.90.0.0/16"]
REAL_VETH = ("10.254.241.1", "10.254.241.2")
QUICK_CHECKS_OFF = ("delta",)  # modes also run with checks off in `--quick`
NOCHECKS = "-nochecks"  # a mode's name with checks off (figures and table)
NOT_RUN = "not run"  # a curve's error when it was skipped
# The open-files limit cannot hold what the config needs: the agent's NACK (it counts
# as HAProxy does, before starting it) or HAProxy's own alert (an agent that let it try)
FD_NACK = re.compile(r"would need ([\d,]+) open files for this config but the limit is ([\d,]+)")
FD_REFUSAL = re.compile(r"Cannot raise FD limit to (\d+), limit is (\d+)")
MASTER_EXIT = re.compile(r"HAProxy master pid=\d+ exited with .*")


class HAProxyRefused(RuntimeError):
    """The config was refused for HAProxy: `words` is what the agent (a NACK) or HAProxy
    (its alert) said; `needed` / `limit` the descriptors, when said."""

    def __init__(self, pod: str, words: str) -> None:
        super().__init__(f"{pod}: refused: {words}")
        self.words = words
        found = FD_NACK.search(words) or FD_REFUSAL.search(words)
        numbers = [int(g.replace(",", "")) for g in found.groups()] if found else [0, 0]
        self.needed, self.limit = numbers


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        after_comm = stat.read().rsplit(")", 1)[1].split()
    return (int(after_comm[11]) + int(after_comm[12])) / _TICKS


@dataclass(frozen=True, slots=True)
class CpuReading:
    """A process's CPU at one moment: each thread's run time in ns (schedstat; {} where the
    kernel has none) and utime + stime of the whole process in seconds (10 ms ticks, the
    CPU of threads that ended included)."""

    threads: dict[int, int]
    ticks_s: float


def cpu_reading(pid: int) -> CpuReading:
    threads: dict[int, int] = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            path = f"/proc/{pid}/task/{tid}/schedstat"
            with contextlib.suppress(OSError, ValueError, IndexError), open(path) as stat:
                threads[int(tid)] = int(stat.read().split()[0])
    return CpuReading(threads, cpu_seconds(pid))


def cpu_between(before: CpuReading, after: CpuReading) -> float:
    """CPU seconds between two readings: every thread's run time in nanoseconds (a thread
    started meanwhile counted whole); the ticks when a thread of the first reading ended
    (its run time since then is gone from the threads)."""
    if before.threads and before.threads.keys() <= after.threads.keys():
        ran = sum(ns - before.threads.get(tid, 0) for tid, ns in after.threads.items())
        return ran / 1e9
    return after.ticks_s - before.ticks_s


ACK_LINE = re.compile(rb"\bACK workload=\S+ version=(\d+)")


class AckLog:
    """The highest version an agent logged an ACK for, read from its log as it grows: the
    benchmark waits for ACKs this way without asking the control plane anything."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""  # a line not yet ended
        self.version = 0
        self.read()

    def read(self) -> int:
        """Reads what was appended since; the highest version ACKed so far."""
        with open(self.path, "rb") as log_file:
            log_file.seek(self.offset)
            data = log_file.read()
        self.offset += len(data)
        lines, _, self.partial = (self.partial + data).rpartition(b"\n")
        for found in ACK_LINE.finditer(lines):
            self.version = max(self.version, int(found.group(1)))
        return self.version


def disk_written(pid: int) -> int:
    """Bytes a process caused to be written to storage (`write_bytes` of /proc/PID/io:
    pages it dirtied), its log file included."""
    with open(f"/proc/{pid}/io") as io:
        for line in io:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def sqlite_ledger(path: Path) -> tuple[int, int]:
    """Rows and the largest row's document bytes of the files ledger at `path`."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows, largest = db.execute("SELECT count(*), max(length(doc)) FROM backends").fetchone()
    return int(rows), int(largest or 0)


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
    cp_cpu: list[float] = field(default_factory=list)  # change's window - idle window
    agent_cpu: list[float] = field(default_factory=list)  # per agent, per change, the same
    # (s, CP CPU s): the idle calibration, then each sample's idle window
    idle_windows: list[tuple[float, float]] = field(default_factory=list)
    unsettled: int = 0  # samples whose ACK lines came before ListAgents showed one content
    bytes_per_agent: list[float] = field(default_factory=list)
    bytes_kinds: dict[str, float] = field(default_factory=dict)
    api_written: list[float] = field(default_factory=list)  # ledger shards, per change
    api_kinds: dict[str, float] = field(default_factory=dict)  # every collection, total
    disk_written: list[float] = field(default_factory=list)  # per change
    ledger_object: float = float("nan")  # largest shard's data / the SQLite file, bytes
    ledger_note: str = ""
    startup_s: float = float("nan")
    complete_s: float = float("nan")  # start to both agents ACKing every endpoint in a slot
    startup_note: str = ""
    load_s: float = float("nan")  # kube, kube-real: writing the cluster to the API server
    checks: bool = False
    reloads: int = 0
    agents_on_deltas: int = 0
    idle: dict[str, float] = field(default_factory=dict)
    cp_rss_mib: tuple[float, float] = (float("nan"), float("nan"))  # after the samples, peak
    agent_rss_mib: tuple[float, float] = (float("nan"), float("nan"))  # the larger agent's
    agents_rss_mib: dict[str, float] = field(default_factory=dict)  # each agent's, now
    # HAProxy's master and serving worker (the larger of the two instances), now, MiB
    haproxy_rss_mib: tuple[float, float] = (float("nan"), float("nan"))
    error: str = ""
    refused: str = ""  # the words refusing this config for HAProxy (agent NACK or HAProxy)
    fd_needed: int = 0  # descriptors HAProxy asked for, when it said
    fd_limit: int = 0  # the limit it met

    @property
    def label(self) -> str:
        """The mode's name in figures and tables: `-nochecks` when checks are off."""
        return self.mode if self.checks else self.mode + NOCHECKS


@dataclass
class Change:
    """One sample: latency and window (s), CPU seconds in the window (control plane, each
    agent), bytes the control plane wrote to the disk and to the API (by collection),
    whether ListAgents showed one content with nothing pending right after the window."""

    latency: float
    window: float
    cpu: tuple[float, list[float]]
    disk: int
    api: dict[str, int]
    settled: bool = True


class ScaleFleet:
    """One fleet over a generated folder or fake API server; every process stopped by
    `stop()` (by PID)."""

    def __init__(
        self,
        workdir: Path,
        services: int,
        mode: Mode,
        binary: str | None,
        octet: int = OCTET,
        checks: bool = True,
        nofile: int | None = None,
    ) -> None:
        """`nofile`: the agents' open-files limit (soft and hard), set right after each
        starts, long before its first snapshot makes it start HAProxy (the smoke test meets
        the descriptor limit at a few Services this way); None: inherited."""
        self.services = services
        self.mode = mode
        self.checks = checks
        self.nofile = nofile
        self.workdir = workdir
        self.metrics_port = free_port()
        self.pods = (
            (f"haproxy-s{octet}a", f"127.{octet}.1.1"),
            (f"haproxy-s{octet}b", f"127.{octet}.1.2"),
        )
        self.state = workdir / "slots.db"
        self.kube: KubeCluster | None = None
        self.real: realapi.RealApi | None = None
        server_args = [] if mode.deltas else ["--no-deltas"]
        if mode.ledger == "files":
            server_args += ["--state", str(self.state)]
        elif mode.ledger == "kube":
            # kube-real: the shipped ServiceAccount's token (`realapi.RealApi.kubeconfig`)
            kubeconfig = workdir / ("controlplane.kubeconfig" if mode.real else "kubeconfig")
            server_args += [
                f"--kubeconfig={kubeconfig}",
                "--leader-elect",
                f"--lease-namespace={NAMESPACE}",
                f"--configmap={NAMESPACE}/haproxy-settings",
                f"--slots-configmap={NAMESPACE}/{LEDGER}",
            ]
        kube = mode.ledger == "kube"
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
            # the leader of a new kube ledger creates one shard per backend first
            serve_timeout=60 + services * (0.25 if mode.real else 0.08 if kube else 0.03),
            source="kubernetes" if kube else None,
        )
        self.timeout = 30 + services * 0.03
        self.changed_index = services // 2
        self.changed = service_name(self.changed_index)
        self.addresses = (endpoint_address(self.changed_index, 0), MOVED_ADDRESS)
        if mode.real:
            self.addresses = (
                realapi.off_loopback(self.addresses[0]),
                realapi.off_loopback(self.addresses[1]),
            )
        self.load_s = float("nan")
        self.complete_s = float("nan")
        self.started_at = float("nan")  # `time.perf_counter` at the control plane's start

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def start(self) -> float:
        """Starts it; seconds from the control plane's start to both agents' first ACK."""
        if self.mode.real:
            self.real = realapi.RealApi(
                self.workdir, self.pods, f"ppbs{os.getpid()}", REAL_PREFIXES, *REAL_VETH
            )
            objects = cluster_objects(self.services, self.pods, HTTP_PORT, PEER_PORT, self.checks)
            settings = next(objects)  # the pods are the installed DaemonSet's (RealApi)
            self.real.apply([settings])
            written = (realapi.endpoints_off_loopback(o) for o in objects if o["kind"] != "Pod")
            self.load_s = self.real.create_all(written)
        elif self.mode.ledger == "kube":
            self.kube = KubeCluster(self.workdir / "kubeapi.log")
            self.load_s = self.kube.load(
                self.services, self.pods, HTTP_PORT, PEER_PORT, self.checks
            )
            write_kubeconfig(self.kube.url, self.workdir / "kubeconfig")
        else:
            write_folder(
                self.fleet.manifests, self.services, self.pods, HTTP_PORT, PEER_PORT, self.checks
            )
        start = time.perf_counter()
        self.fleet.start_control_plane()
        for name, address in self.pods:
            agent = self.fleet.start_agent(name, address, ["--metrics-port", str(free_port())])
            if self.nofile is not None:
                limit = (self.nofile, self.nofile)
                resource.prlimit(agent.process.pid, resource.RLIMIT_NOFILE, limit)
        # The agents' logs until each ACKed, then ListAgents: asking the control plane
        # every 10 ms while HAProxy loads cost it and this process about 0.1 core-second
        # per second, on the cores the start being measured runs on.
        wait_s = self.timeout + self.services * 0.02
        self.wait_ack_lines(self.ack_logs(), 0, wait_s, lambda: self.refused(self.status()))
        self.wait_acked(lambda status: True, wait_s)
        first = time.perf_counter() - start
        self.wait_complete(self.fleet.serve_timeout + self.timeout + self.services * 0.05)
        self.complete_s = time.perf_counter() - start
        self.started_at = start
        return first

    def wait_ledger_shards(self, timeout: float) -> float:
        """Until every backend is a shard and no bulk object is left (a first start's bulk
        objects are made shards after the first publication, in the background: the samples
        must not measure that); seconds from the control plane's start."""

        def stats() -> dict[str, Any]:
            if self.real is not None:
                return dict(self.real.ledger_stats())
            return self.kube.stats() if self.kube is not None else {"shards": 0, "bulk": 0}

        def settled() -> bool:
            found = stats()
            return bool(found["shards"] >= self.services and found["bulk"] == 0)

        wait_until(settled, timeout, "every backend's shard written", step=1.0)
        return time.perf_counter() - self.started_at

    def wait_complete(self, timeout: float) -> None:
        """Until both agents ACKed a content with every endpoint in an enabled slot: a
        first snapshot may come before the leader wrote the whole ledger (its slots fill
        in later versions), and the samples must not measure that catching up."""
        want = self.services * ENDPOINTS
        channel = grpc.insecure_channel(
            self.fleet.control_plane_address,
            options=[("grpc.max_receive_message_length", SNAPSHOT_LIMIT)],
        )
        complete: list[str] = []
        try:
            stub = peerplane_pb2_grpc.PeerPlaneStub(channel)

            def whole() -> bool:
                found = stub.GetSnapshot(pb.GetSnapshotRequest(workload=WORKLOAD), timeout=60)
                enabled = sum(1 for b in found.backends for slot in b.slots if slot.enabled)
                if enabled >= want:
                    complete.append(found.content_hash)
                return enabled >= want

            wait_until(whole, timeout, "every endpoint in a slot", step=1.0)
        finally:
            channel.close()
        self.wait_acked(lambda s: s.acked_content_hash == complete[-1], timeout)

    def stop(self) -> None:
        self.fleet.stop()
        if self.kube is not None:
            self.kube.stop()
        if self.real is not None:
            self.real.close()

    def status(self) -> list[pb.AgentStatus]:
        try:
            return self.fleet.agents_status()
        except grpc.RpcError:
            return []

    def wait_acked(
        self, newer: Callable[[pb.AgentStatus], bool], timeout: float
    ) -> list[pb.AgentStatus]:
        """Until both agents ACKed one same content and `newer(status)` holds for each;
        fails fast when an agent died, logged a gRPC size refusal or NACKed the config
        for descriptors (`HAProxyRefused`)."""
        found: list[pb.AgentStatus] = []
        checked = [time.monotonic()]

        def done() -> bool:
            status = self.status()
            self.refused(status)
            if time.monotonic() - checked[0] > 1:
                checked[0] = time.monotonic()
                self.check_agents()
            hashes = {s.acked_content_hash for s in status}
            one = len(status) == len(self.pods) and len(hashes) == 1 and "" not in hashes
            if one and all(s.pending_version == 0 and newer(s) for s in status):
                found[:] = status
                return True
            return False

        wait_until(done, timeout, "both agents' ACK", step=POLL_S)
        return found

    @staticmethod
    def refused(status: list[pb.AgentStatus]) -> None:
        """Raises `HAProxyRefused` for an agent whose last NACK refused the config for
        descriptors: final (a resync NACK heals)."""
        for s in status:
            refused = s.last_nack_version > s.acked_version
            if refused and FD_NACK.search(s.last_nack_error):
                raise HAProxyRefused(s.agent, s.last_nack_error)

    def check_agents(self) -> None:
        for agent in self.fleet.agents.values():
            if agent.process.poll() is not None:
                raise RuntimeError(f"agent {agent.pod_name} exited\n{_tail(agent.log)}")
            text = _tail(agent.log, 40)
            words = refusal(text)
            if words:
                raise HAProxyRefused(agent.pod_name, words)
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

    def agents_rss(self) -> dict[str, float]:
        """Resident MiB of each agent now, by pod name."""
        return {a.pod_name: rss_mib(a.process.pid)[0] for a in self.fleet.agents.values()}

    def haproxy_rss(self) -> tuple[float, float]:
        """Resident MiB of HAProxy's master and serving worker, the larger instance's."""
        found = []
        for agent in self.fleet.agents.values():
            info = HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc()
            worker = info.current_worker
            master = rss_mib(info.master_pid)[0]
            found.append((master, rss_mib(worker)[0] if worker else float("nan")))
        return max(found, key=lambda r: r[1])

    def cpu(self) -> tuple[CpuReading, list[CpuReading]]:
        cp, agents = self.pids()
        return cpu_reading(cp), [cpu_reading(pid) for pid in agents]

    @staticmethod
    def cpu_used(
        before: tuple[CpuReading, list[CpuReading]], after: tuple[CpuReading, list[CpuReading]]
    ) -> tuple[float, list[float]]:
        """CPU seconds of the control plane and of each agent between two `cpu()`."""
        agents = [cpu_between(a, b) for a, b in zip(before[1], after[1], strict=True)]
        return cpu_between(before[0], after[0]), agents

    def idle_window(self, seconds: float) -> tuple[float, list[float]]:
        """CPU seconds of the control plane and of each agent over `seconds` in which
        nothing changes and nothing is asked of them."""
        cpu0 = self.cpu()
        time.sleep(seconds)
        return self.cpu_used(cpu0, self.cpu())

    def ack_logs(self) -> list[AckLog]:
        return [AckLog(a.log) for a in self.fleet.agents.values()]

    def wait_ack_lines(
        self,
        logs: list[AckLog],
        before: int,
        timeout: float,
        also: Callable[[], None] = lambda: None,
    ) -> None:
        """Until every agent logged an ACK of a version above `before`; fails fast as
        `wait_acked` does (an agent gone or refused, checked every second, then `also`)."""
        deadline = checked = time.monotonic()
        deadline += timeout
        while not all(log_.read() > before for log_ in logs):
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"no ACK above version {before} in the agents' logs")
            if now - checked > 1:
                checked = now
                self.check_agents()
                also()
            time.sleep(LOG_POLL_S)

    def disk(self) -> int:
        return disk_written(self.pids()[0])

    def api_received(self) -> dict[str, int]:
        """Request body bytes the fake API server received, by collection ({}: no API)."""
        if self.kube is None:
            return {}
        return {str(k): int(v) for k, v in self.kube.stats()["received"].items()}

    def ledger(self) -> tuple[float, str]:
        """The largest ledger object (bytes) and what else to say about the ledger."""
        if self.mode.ledger == "files":
            rows, largest = sqlite_ledger(self.state)
            wal = Path(f"{self.state}-wal")
            wal_size = wal.stat().st_size if wal.exists() else 0
            note = f"{rows:,} rows, largest {largest:,} B, WAL {wal_size / 1024:,.0f} KiB"
            return float(self.state.stat().st_size), note
        stats = (
            self.kube.stats()
            if self.kube is not None
            else self.real.ledger_stats()
            if self.real is not None
            else None
        )
        if stats is not None:
            note = f"{stats['shards']:,} shards, {stats['total'] / 1024:,.0f} KiB in all"
            return float(stats["largest_shard"]), note
        return float("nan"), ""

    def reloads(self) -> int:
        return sum(
            HAProxy(str(a.master_socket), str(a.runtime_socket)).show_proc().reloads
            for a in self.fleet.agents.values()
        )

    def workers(self) -> list[int]:
        """The serving HAProxy worker of each instance."""
        found = []
        for agent in self.fleet.agents.values():
            worker = HAProxy(str(agent.master_socket), str(agent.runtime_socket)).show_proc()
            if worker.current_worker is not None:
                found.append(worker.current_worker)
        return found

    def idle_rates(self, seconds: float = CALIBRATE_S) -> tuple[float, float, float]:
        """CPU seconds per second of the control plane, of one agent and of one HAProxy
        worker (means) while nothing changes and nothing is polled. HAProxy's idle CPU is
        its health checks' cost."""
        workers = self.workers()
        cpu0 = self.cpu()
        haproxy0 = [cpu_seconds(pid) for pid in workers]
        start = time.perf_counter()
        time.sleep(seconds)
        cp, agents = self.cpu_used(cpu0, self.cpu())
        haproxy1 = [cpu_seconds(pid) for pid in workers]
        elapsed = time.perf_counter() - start
        haproxy = sum(b - a for a, b in zip(haproxy0, haproxy1, strict=True))
        haproxy /= max(1, len(workers))
        return cp / elapsed, statistics.fmean(agents) / elapsed, haproxy / elapsed

    def change(self, sample: int) -> Change:
        """Moves the endpoint: an atomic rename of its Service's file, or its
        EndpointSlice replaced in the API; then waits for both agents' ACK."""
        old, new = self.addresses[sample % 2], self.addresses[(sample + 1) % 2]
        move: Callable[[], None]
        if self.kube is not None:
            kube = self.kube

            def move() -> None:
                kube.move(self.changed_index, old, new)

        elif self.real is not None:
            real = self.real

            def move() -> None:
                real.move("default", slice_name(self.changed_index), old, new)

        else:
            path = self.fleet.manifests / f"{self.changed}.yaml"
            text = path.read_text()
            changed = text.replace(f'"{old}"', f'"{new}"')
            if changed == text:
                raise RuntimeError(f"{path.name}: {old} not found")
            tmp = path.with_suffix(".tmp")
            tmp.write_text(changed)

            def move() -> None:
                os.replace(tmp, path)

        logs = self.ack_logs()  # the last sample ended on one content, nothing pending
        before = max(log_.version for log_ in logs)
        api0, disk0 = self.api_received(), self.disk()
        cpu0 = self.cpu()
        start = time.perf_counter()
        move()
        self.wait_ack_lines(logs, before, self.timeout)
        latency = time.perf_counter() - start
        time.sleep(SETTLE_S)
        cpu1 = self.cpu()
        window = time.perf_counter() - start
        last = max(log_.read() for log_ in logs)
        disk1, api1 = self.disk(), self.api_received()
        api = {k: v - api0.get(k, 0) for k, v in api1.items() if v != api0.get(k, 0)}
        settled = self._one_content(last)
        if not settled:
            self.wait_acked(lambda s: s.acked_version >= last, self.timeout)
        return Change(latency, window, self.cpu_used(cpu0, cpu1), disk1 - disk0, api, settled)

    def _one_content(self, version: int) -> bool:
        """Whether both agents ACKed one content, at `version` or later, nothing pending."""
        status = self.status()
        hashes = {s.acked_content_hash for s in status}
        return (
            len(status) == len(self.pods)
            and len(hashes) == 1
            and all(s.acked_version >= version and s.pending_version == 0 for s in status)
        )


def refusal(log_text: str) -> str:
    """HAProxy's words when a master would not start ("" when every one did): its
    descriptor alert, else the agent's line on the master's exit."""
    found = FD_REFUSAL.search(log_text) or MASTER_EXIT.search(log_text)
    if found is None:
        return ""
    line = log_text[log_text.rfind("\n", 0, found.start()) + 1 : found.end()]
    alert = line.find("[ALERT]")
    return (line[alert:] if alert >= 0 else found.group(0)).strip()


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def measure(
    services: int,
    mode: Mode,
    samples: int,
    binary: str | None,
    octet: int = OCTET,
    calibrate_s: float = CALIBRATE_S,
    checks: bool = True,
    nofile: int | None = None,
) -> Curve:
    """One fleet, `samples` changes; the curve point (with `error` set if it failed,
    `refused` too when HAProxy would not start with the config)."""
    curve = Curve(services, mode.name, samples, checks=checks)
    work = Path(tempfile.mkdtemp(prefix=f"bench-scale-{services}-{curve.label}-"))
    fleet = ScaleFleet(work, services, mode, binary, octet, checks, nofile)
    try:
        curve.startup_s = fleet.start()
        curve.load_s = fleet.load_s
        curve.complete_s = fleet.complete_s
        shards_s = (
            fleet.wait_ledger_shards(fleet.timeout + services * 0.05)
            if mode.ledger == "kube"
            else float("nan")
        )
        if fleet.real is not None:
            shards = fleet.real.ledger_stats()["shards"]
            curve.startup_note = (
                f"cluster up and deploy/ installed in {fleet.real.up_s:.0f} s; API loaded in "
                f"{fleet.load_s:.1f} s ({realapi.WRITERS} writers); startup wrote "
                f"{shards:,} shards (the last at {shards_s:.1f} s)"
            )
        elif mode.ledger == "kube":
            written = fleet.api_received()
            shards = fleet.kube.stats()["shards"] if fleet.kube is not None else 0
            curve.startup_note = (
                f"API loaded in {fleet.load_s:.1f} s; startup wrote {shards:,} shards, "
                f"{written.get('configmaps', 0) / 1024:,.0f} KiB (the last at {shards_s:.1f} s)"
            )
        curve.agents_on_deltas = sum(1 for s in fleet.status() if s.deltas)
        time.sleep(QUIET_S)
        cp_idle, agent_idle, haproxy_idle = fleet.idle_rates(calibrate_s)
        curve.idle_windows.append((calibrate_s, cp_idle * calibrate_s))
        curve.idle = {
            "cp_idle_ms_per_s": cp_idle * 1000,
            "agent_idle_ms_per_s": agent_idle * 1000,
            "haproxy_idle_ms_per_s": haproxy_idle * 1000,
        }
        reloads0 = fleet.reloads()
        for sample in range(samples):
            time.sleep(QUIET_S)
            sent0 = sent_bytes(fleet.metrics_url)
            change = fleet.change(sample)
            sent1 = sent_bytes(fleet.metrics_url)
            time.sleep(QUIET_S)
            idle_cp, idle_agents = fleet.idle_window(change.window)
            (cp, agents) = change.cpu
            curve.latencies.append(change.latency)
            curve.unsettled += not change.settled
            curve.cp_cpu.append(cp - idle_cp)
            curve.idle_windows.append((change.window, idle_cp))
            per_agent = statistics.fmean(agents) - statistics.fmean(idle_agents)
            curve.agent_cpu.append(per_agent)
            curve.disk_written.append(change.disk)
            if fleet.kube is not None:
                curve.api_written.append(change.api.get("configmaps", 0))
                for kind, count in change.api.items():
                    curve.api_kinds[kind] = curve.api_kinds.get(kind, 0.0) + count
            if sent0 is not None and sent1 is not None:
                diff = {k: sent1.get(k, 0.0) - sent0.get(k, 0.0) for k in sent1}
                for kind, value in diff.items():
                    curve.bytes_kinds[kind] = curve.bytes_kinds.get(kind, 0.0) + value
                curve.bytes_per_agent.append(sum(diff.values()) / len(fleet.pods))
        curve.reloads = fleet.reloads() - reloads0
        if fleet.real is not None:
            refused = realapi.refused_calls(work / "controlplane.log")
            curve.startup_note += f"; {refused} calls refused by the shipped RBAC"
        curve.ledger_object, curve.ledger_note = fleet.ledger()
        curve.cp_rss_mib, curve.agent_rss_mib = fleet.rss()
        curve.agents_rss_mib = fleet.agents_rss()
        curve.haproxy_rss_mib = fleet.haproxy_rss()
    except HAProxyRefused as err:  # what users with this limit meet: a row, not a crash
        curve.refused = err.words
        curve.error = f"refused: {err.words}"
        curve.fd_needed, curve.fd_limit = err.needed, err.limit
        log(f"scale N={services} {curve.label}: {err}")
    except Exception as err:  # one size failing must not lose the others
        curve.error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        log(f"scale N={services} {curve.label}: {err}")
    finally:
        fleet.stop()
        shutil.rmtree(work, ignore_errors=True)
    return curve


def samples_for(services: int, mode: str, quick: bool) -> int:
    if quick:
        return 3
    if mode != "full":
        return 20
    return 10 if services <= 500 else 3


def cpu_mean(values: list[float]) -> float:
    """Mean CPU per change (each sample: its window minus its idle window, so it may be
    below 0 when a timer's pass fell into the idle one; the mean is not biased)."""
    return statistics.fmean(values) if values else float("nan")


def cpu_idle_rate(curve: Curve) -> float:
    """The control plane's CPU seconds per second over its idle windows (the calibration
    and each sample's)."""
    seconds = sum(w for w, _ in curve.idle_windows)
    return sum(c for _, c in curve.idle_windows) / seconds if seconds else float("nan")


def _ms_of(value: float) -> str:
    return f"{value * 1000:,.0f} ms" if abs(value) >= 0.01 else f"{value * 1000:.1f} ms"


def _ms(values: list[float], q: float | None = None) -> str:
    if not values:
        return "n/a"
    return _ms_of(median(values) if q is None else percentile(values, q))


def _cpu(values: list[float]) -> str:
    """Median / mean per change."""
    if not values:
        return "n/a"
    return f"{_ms_of(median(values))} / {_ms_of(cpu_mean(values))}"


def _idle(curve: Curve) -> str:
    rate = cpu_idle_rate(curve)
    return "n/a" if rate != rate else f"{rate * 1000:.1f} ms/s"


def _bytes(values: list[float]) -> str:
    if not values:
        return "n/a"
    value = median(values)
    return f"{value / 1024:,.1f} KiB" if value >= 1024 else f"{value:,.0f} B"


def _size(value: float) -> str:
    if value != value:
        return "n/a"
    return f"{value / 1024:,.1f} KiB" if value >= 1024 else f"{value:,.0f} B"


def target_misses(curve: Curve) -> list[str]:
    """The ledger targets this point misses (none below `TARGET_FROM` Services)."""
    if curve.error or curve.services < TARGET_FROM:
        return []
    misses = []
    if curve.latencies and median(curve.latencies) >= TARGET_P50_S:
        misses.append("p50")
    if curve.cp_cpu and median(curve.cp_cpu) >= TARGET_CP_CPU_S:
        misses.append("CP CPU")
    if curve.api_written and median(curve.api_written) >= TARGET_API_BYTES:
        misses.append("API bytes")
    if curve.disk_written and median(curve.disk_written) >= TARGET_DISK_BYTES:
        misses.append("disk bytes")
    if curve.ledger_object >= TARGET_OBJECT_BYTES:
        misses.append("ledger object")
    return misses


def _verdict(curve: Curve) -> str:
    if curve.error or curve.services < TARGET_FROM:
        return "-"
    misses = target_misses(curve)
    return "missed: " + ", ".join(misses) if misses else "met"


def _startup(c: Curve) -> str:
    """First ACK / every endpoint ACKed, from the control plane's start."""
    if c.startup_s != c.startup_s:
        return "n/a"
    return f"{c.startup_s:.1f} / {c.complete_s:.1f} s"


def _api_written(c: Curve) -> str:
    """Metered at the fake API server only (the real one is not)."""
    if c.mode == "kube":
        return _bytes(c.api_written)
    return "n/a" if c.mode == "kube-real" else "-"


def _mib(value: tuple[float, float]) -> str:
    now, peak = value
    return f"{now:,.0f} / {peak:,.0f} MiB" if now == now else "n/a"


def _note(c: Curve) -> str:
    if c.fd_needed:
        return f"refused: needs {c.fd_needed:,} descriptors, limit {c.fd_limit:,}"
    if c.error:
        return c.error
    return "; ".join(
        x
        for x in (
            f"{c.samples} samples, {c.reloads} reloads, {c.agents_on_deltas} agents on deltas",
            f"{c.unsettled} unsettled" if c.unsettled else "",
            f"checks {'on' if c.checks else 'off'}",
            c.ledger_note,
            c.startup_note,
        )
        if x
    )


def curve_table(curves: list[Curve]) -> str:
    """The curve side by side: one row per (N, mode)."""
    head = (
        "N",
        "mode",
        "p50",
        "p99",
        "CP CPU med / mean",
        "CP idle",
        "agent CPU med / mean",
        "bytes/agent",
        "API written",
        "disk written",
        "largest ledger object",
        "targets",
        "startup first / all",
        "CP RSS / peak",
        "agent RSS / peak",
        "HAProxy master / worker",
        "note",
    )
    rows = []
    for c in curves:
        note = _note(c)
        if not c.error and c.mode == "delta" and c.bytes_kinds and not c.bytes_kinds.get("delta"):
            note += "; server sent no deltas"
        rows.append(
            (
                f"{c.services:,}",
                c.label,
                _ms(c.latencies),
                _ms(c.latencies, 99),
                _cpu(c.cp_cpu),
                _idle(c),
                _cpu(c.agent_cpu),
                _bytes(c.bytes_per_agent),
                _api_written(c),
                _bytes(c.disk_written),
                _size(c.ledger_object),
                _verdict(c),
                _startup(c),
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
        f"targets: {TARGETS_TEXT}; CPU: median / mean per change of its window minus an idle "
        "window as long (CP idle: the control plane's CPU per second in those idle windows, "
        "its timers' work), bytes: median per change (API: request "
        "bodies to ConfigMaps at the fake API server; disk: write_bytes of the control plane, "
        "its log included); largest ledger object: the largest shard's data (kube), the SQLite "
        "file (state); RSS after the samples / peak since start (agent: the larger peak of "
        "the two, its HAProxy not counted, nor its `haproxy -c` children); HAProxy: RSS of "
        "the master and the serving worker"
    )
    return "\n".join(lines)


def results_of(curve: Curve, binary: str) -> list[Result]:
    base = f"scale.n{curve.services}.{curve.label}"
    params: dict[str, Any] = {
        "services": curve.services,
        "endpoints": curve.services * 20,
        "mode": curve.mode,
        "samples": len(curve.latencies),
        "agents": 2,
        "haproxy": binary,
        "reloads": curve.reloads,
        "unsettled": curve.unsettled,
        "agents_on_deltas": curve.agents_on_deltas,
        "health_checks": curve.checks,
        **{k: round(v, 2) for k, v in curve.idle.items()},
    }
    if curve.error.startswith(NOT_RUN):
        return []
    if curve.refused:
        said = {**params, "haproxy_said": curve.refused, "fd_limit": curve.fd_limit}
        found = [Result(f"{base}.refused", 1, "run", said)]
        if curve.fd_needed:
            found.append(Result(f"{base}.fd_needed", curve.fd_needed, "descriptors", said))
        return found
    if curve.error:
        return [Result(f"{base}.failed", 1, "run", {**params, "error": curve.error})]
    found = [
        Result(f"{base}.startup_first_ack", curve.startup_s, "s", params),
        Result(f"{base}.change_to_ack_p50", median(curve.latencies) * 1000, "ms", params),
        Result(f"{base}.change_to_ack_p99", percentile(curve.latencies, 99) * 1000, "ms", params),
        Result(
            f"{base}.cp_cpu_per_change",
            median(curve.cp_cpu) * 1000,
            "ms",
            {**params, "mean_ms": round(cpu_mean(curve.cp_cpu) * 1000, 2)},
        ),
        Result(f"{base}.cp_idle_cpu", cpu_idle_rate(curve) * 1000, "ms/s", params),
        Result(
            f"{base}.agent_cpu_per_change",
            median(curve.agent_cpu) * 1000,
            "ms",
            {**params, "mean_ms": round(cpu_mean(curve.agent_cpu) * 1000, 2)},
        ),
        Result(f"{base}.cp_rss", curve.cp_rss_mib[0], "MiB", params),
        Result(f"{base}.cp_rss_peak", curve.cp_rss_mib[1], "MiB", params),
        Result(f"{base}.agent_rss", curve.agent_rss_mib[0], "MiB", params),
        Result(f"{base}.agent_rss_peak", curve.agent_rss_mib[1], "MiB", params),
        *(
            Result(f"{base}.agent_rss.{pod}", rss, "MiB", params)
            for pod, rss in sorted(curve.agents_rss_mib.items())
        ),
        Result(f"{base}.haproxy_master_rss", curve.haproxy_rss_mib[0], "MiB", params),
        Result(f"{base}.haproxy_worker_rss", curve.haproxy_rss_mib[1], "MiB", params),
        Result(
            f"{base}.haproxy_idle_cpu",
            curve.idle.get("haproxy_idle_ms_per_s", float("nan")),
            "ms/s",
            params,
        ),
    ]
    if curve.load_s == curve.load_s:
        found.append(Result(f"{base}.api_load", curve.load_s, "s", params))
    if curve.complete_s == curve.complete_s:
        found.append(Result(f"{base}.startup_all_endpoints_ack", curve.complete_s, "s", params))
    if curve.startup_note:
        found[0] = Result(
            found[0].name, curve.startup_s, "s", {**params, "note": curve.startup_note}
        )
    if curve.api_written:
        kinds = {k: round(v) for k, v in curve.api_kinds.items()}
        found.append(
            Result(
                f"{base}.api_written_per_change",
                median(curve.api_written),
                "bytes",
                {**params, "received_by_collection_total": kinds},
            )
        )
    if curve.disk_written:
        found.append(
            Result(f"{base}.disk_written_per_change", median(curve.disk_written), "bytes", params)
        )
    if curve.ledger_object == curve.ledger_object:
        found.append(
            Result(
                f"{base}.ledger_largest_object",
                curve.ledger_object,
                "bytes",
                {**params, "note": curve.ledger_note},
            )
        )
    if curve.services >= TARGET_FROM:
        misses = target_misses(curve)
        found.append(
            Result(f"{base}.targets_missed", len(misses), "targets", {**params, "missed": misses})
        )
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


# (label, unit, how a curve gives it) of the checks on / off comparison
CHECKS_FIGURES: tuple[tuple[str, str, Callable[[Curve], float]], ...] = (
    ("p50", "ms", lambda c: median(c.latencies) * 1000),
    ("cp_cpu", "ms", lambda c: median(c.cp_cpu) * 1000),
    ("agent_cpu", "ms", lambda c: median(c.agent_cpu) * 1000),
    ("haproxy_idle_cpu", "ms/s", lambda c: c.idle.get("haproxy_idle_ms_per_s", float("nan"))),
    ("haproxy_worker_rss", "MiB", lambda c: c.haproxy_rss_mib[1]),
    ("startup", "s", lambda c: c.startup_s),
)


def checks_pairs(curves: list[Curve]) -> list[tuple[Curve, Curve]]:
    """(checks on, checks off) of each (N, mode) where both ran to the end."""
    done = {(c.services, c.mode, c.checks): c for c in curves if not c.error}
    return [
        (on, done[(on.services, on.mode, False)])
        for (services, mode, checks), on in done.items()
        if checks and (services, mode, False) in done
    ]


def _ratio(on: float, off: float) -> float:
    return on / off if off > 0 and on == on else float("nan")


def checks_table(curves: list[Curve]) -> str:
    """Checks on beside checks off: values `on / off` and their ratio; refusals too."""
    head = ("N", "mode", *(f"{label} ({unit}) on / off" for label, unit, _ in CHECKS_FIGURES))
    rows = []
    for on, off in checks_pairs(curves):
        cells = []
        for _, _, value in CHECKS_FIGURES:
            a, b = value(on), value(off)
            ratio = _ratio(a, b)
            cells.append(f"{a:,.1f} / {b:,.1f}" + (f" (x{ratio:.2f})" if ratio == ratio else ""))
        rows.append((f"{on.services:,}", on.mode, *cells))
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for c in curves:
        if c.refused:
            lines.append(f"N={c.services:,} {c.label}: {c.error}")
    return "\n".join(lines)


def checks_results(curves: list[Curve]) -> list[Result]:
    """`scale.nN.MODE.checks_on_over_off.FIGURE`: checks on divided by checks off."""
    found = []
    for on, off in checks_pairs(curves):
        params = {"services": on.services, "mode": on.mode, "samples": len(on.latencies)}
        for label, unit, value in CHECKS_FIGURES:
            a, b = value(on), value(off)
            ratio = _ratio(a, b)
            if ratio == ratio:
                extra = {**params, "on": round(a, 2), "off": round(b, 2), "unit": unit}
                name = f"scale.n{on.services}.{on.mode}.checks_on_over_off.{label}"
                found.append(Result(name, ratio, "ratio", extra))
    return found


# Targets (README, "Performance"; `TARGETS_TEXT`): figure pattern -> target.
TARGETS = {
    "scale.*.refused": "none at the open-files limit",
    "scale.*.fd_needed": "<= the open-files limit",
    "scale.*.change_to_ack_p50": "< 100 ms at 8,000 (issue 33)",
    "scale.*.change_to_ack_p99": "< 500 ms at 2,000",
    "scale.*.cp_cpu_per_change": "< 10 ms at 8,000 (issue 33)",
    "scale.*.startup_all_endpoints_ack": "< 30 s at 8,000 (issue 33)",
    "scale.*.agent_cpu_per_change": "< 20 ms at 2,000",
    "scale.*.bytes_per_agent_per_change": "< 2 KB at 2,000",
    "scale.*.api_written_per_change": "< 16 KiB",
    "scale.*.disk_written_per_change": "< 64 KiB",
    "scale.*.ledger_largest_object": "< 64 KiB at 2,000+",
    "scale.*.targets_missed": "0",
}


def run(
    quick: bool = False,
    sizes: tuple[int, ...] | None = None,
    binary: str | None = None,
    octet: int = OCTET,
    samples: int | None = None,
    modes: tuple[str, ...] = DEFAULT_MODES,
    calibrate_s: float = CALIBRATE_S,
    checks_off: tuple[str, ...] | None = None,
    nofile: int | None = None,
) -> list[Result]:
    """The curve; the keyword arguments let the smoke test run a small, separate fleet
    (own `octet`, `binary` the HAProxy, default the one on PATH, a shorter idle
    calibration, the agents' open-files limit `nofile`) and pick `modes` (names of
    `MODES`; "full" compares full snapshots with deltas) and the modes also run with
    checks off (`checks_off`, default: every mode, `QUICK_CHECKS_OFF` when `quick`; every
    mode at an N where HAProxy refused the config with checks on)."""
    binary = binary or haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy not found")
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    if checks_off is None:
        checks_off = tuple(m for m in modes if m in QUICK_CHECKS_OFF) if quick else modes
    if "kube-real" in modes and (why := realapi.unavailable()):
        modes = tuple(m for m in modes if m != "kube-real")
        checks_off = tuple(m for m in checks_off if m != "kube-real")
        log(f"scale: kube-real skipped: {why}")
        print(f"scale: kube-real (a real API server) skipped: {why}")
    if "full" in modes and not server_has_no_deltas_flag():
        modes = tuple(m for m in modes if m != "full")
        checks_off = tuple(m for m in checks_off if m != "full")
        log("scale: `controlplane serve` has no --no-deltas: full mode left out")
    curves: list[Curve] = []

    def one(services: int, name: str, checks: bool) -> Curve:
        count = samples or samples_for(services, name, quick)
        label = name if checks else name + NOCHECKS
        log(f"scale: N={services} {label}, {count} samples")
        started = time.perf_counter()
        curve = measure(services, MODES[name], count, binary, octet, calibrate_s, checks, nofile)
        log(f"scale: N={services} {label}: {time.perf_counter() - started:.0f} s")
        curves.append(curve)
        return curve

    for services in sizes:
        refused: Curve | None = None
        for name in modes:
            if refused is None:
                curve = one(services, name, checks=True)
                refused = curve if curve.refused else None
                continue
            # The same HAProxy config in every mode: it would be refused again.
            skipped = Curve(services, name, 0, checks=True)
            skipped.error = f"{NOT_RUN}: HAProxy refused this N with checks on ({refused.label})"
            curves.append(skipped)
        for name in modes if refused is not None else checks_off:
            one(services, name, checks=False)
    print(curve_table(curves))
    print(checks_table(curves))
    results = [r for c in curves for r in results_of(c, binary)]
    results += checks_results(curves)
    failed = [c for c in curves if c.error and not c.error.startswith(NOT_RUN)]
    if failed and len(failed) == len(curves):
        raise RuntimeError(f"every scale run failed: {failed[0].error}")
    return results


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["scale", *sys.argv[1:]]))
