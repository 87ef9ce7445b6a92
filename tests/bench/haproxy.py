"""Agent and HAProxy: an endpoint change applied through the runtime API vs by a reload.

Drives the real node agent's apply path in this process: `nodeagent.apply.applier.Applier` with
its `HAProxy` driver and `Supervisor`, wired as `nodeagent run --manage-haproxy` wires them
(same defaults), each managing a real HAProxy 2.6 in master-worker mode; the backend
has health checks on with the default settings, as users run it. Two instances,
haproxy-a and haproxy-b, each on its own loopback address (127.41.1.1, 127.41.1.2), peer
with each other through `peers localinstance` and both apply every snapshot, as two pods
of one workload do. Backend pods are `tests.helpers.fleet.Backends` (tiny HTTP servers
answering with their pod name) on 127.41.2.1 and 127.41.2.2.

One slot (SRV_1 of 42) moves between the two backend pods. Runtime path: only the slot
address changes (the applier picks `set server`). Reload path: the slot address and the
stick-table expire change together (the applier picks a hitless reload, and the new
address serves only once the new worker runs). The timer starts when the snapshot is
handed to `Applier.apply` on haproxy-a ("received") and stops at the first request through
haproxy-a answered by the new pod (each probe a new connection, after `apply` returned:
the agent ACKs then). haproxy-b applies the same snapshot afterwards, untimed.

The time inside `apply` is split by wrapping the applier's own calls (render, `haproxy
-c` validation, runtime `set server`, reload with its peer-resync wait, config and state
writes); `validate` is reported on its own. A load process sends requests through
haproxy-a on new connections as fast as it can and counts failures, one run per path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import nodeagent.apply.checked_render
import nodeagent.apply.validation
from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions
from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.supervisor import Supervisor
from peerplane import healthcheck
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Child, Result, log, median, percentile
from tests.helpers.fleet import Backends, free_port, haproxy_binary, http_get, table_entries
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.waiting import wait_until

OCTET = 41  # 127.41.x.y: apart from the tests (31, 100-250), the demo (0), e2e bench (40)
BACKEND_PORT = 8888
HOST = "shop.example.com"
BACKEND = "default_shop_http"
SLOTS = 42  # the design's default `server-slots`
EXPIRES_MS = (1_800_000, 1_860_000)
# Pause after each sample. A reload sample waits out the agent's bounded peer-resync wait
# (`HAProxy.sync_wait`, 5 s) so that it measures one change after quiet; the back-to-back
# samples (changes 0.5 s apart) show what that wait costs when changes come faster.
RUNTIME_GAP_S = 0.05
BACK_TO_BACK_GAP_S = 0.5
PHASES = ("render", "validate", "set_servers", "reload", "wait_peers_synced", "write", "save")


@dataclass(frozen=True)
class Net:
    """The loopback addresses of one run: every pod and client on 127.<octet>.x.y."""

    octet: int

    def ip(self, rest: str) -> str:
        return f"127.{self.octet}.{rest}"

    @property
    def haproxy_pods(self) -> tuple[tuple[str, str], ...]:
        return (("haproxy-a", self.ip("1.1")), ("haproxy-b", self.ip("1.2")))

    @property
    def backend_pods(self) -> tuple[tuple[str, str], ...]:
        return (("shop-0", self.ip("2.1")), ("shop-1", self.ip("2.2")))

    @property
    def load_client(self) -> str:
        return self.ip("9.1")

    @property
    def probe_client(self) -> str:
        return self.ip("9.2")

    @property
    def pinned_clients(self) -> list[str]:
        return [self.ip(f"8.{i}") for i in range(1, 11)]


@dataclass
class Agent:
    """One HAProxy instance with the agent's apply path, as `nodeagent run` builds it."""

    pod: str
    ip: str
    applier: Applier
    haproxy: HAProxy
    supervisor: Supervisor

    @classmethod
    def create(
        cls, work: Path, pod: str, ip: str, haproxy_bin: str, sync_wait: float | None
    ) -> Agent:
        directory = work / pod
        state_dir = directory / "state"
        master, runtime = str(directory / "master.sock"), str(directory / "runtime.sock")
        config = str(directory / "haproxy.cfg")
        haproxy = HAProxy(master, runtime, haproxy_bin)  # the CLI's defaults
        if sync_wait is not None:
            haproxy.sync_wait = sync_wait
        supervisor = Supervisor(config, master, str(state_dir / "haproxy.pid"), haproxy_bin)
        options = RenderOptions(pod, bind_address=ip, runtime_socket=runtime)
        applier = Applier(options, config, StateStore(str(state_dir)), haproxy, supervisor)
        return cls(pod, ip, applier, haproxy, supervisor)


class Phases:
    """Wall time of the applier's own steps, recorded by wrapping the calls it makes."""

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = defaultdict(list)
        self.enabled = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.enabled:
                    self.times[name].append(time.perf_counter() - start)

        return timed

    @contextmanager
    def installed(self, agent: Agent) -> Iterator[None]:
        """Wrap the module functions the applier calls and the timed agent's methods."""
        modules = {
            "render_held": nodeagent.apply.checked_render,
            "validate": nodeagent.apply.validation,
        }
        module_originals: dict[str, Callable[..., Any]] = {
            name: getattr(module, name) for name, module in modules.items()
        }
        phase = {"render_held": "render", "validate": "validate"}
        try:
            for name, fn in module_originals.items():
                setattr(modules[name], name, self.wrap(phase[name], fn))
            # Instance attributes shadow the class's methods for this one agent only.
            hx, applier = agent.haproxy, agent.applier
            methods: list[tuple[object, str, str]] = [
                (hx, "set_servers", "set_servers"),
                (hx, "reload", "reload"),
                (hx, "wait_peers_synced", "wait_peers_synced"),
                (applier.files, "write_config", "write"),
                (applier.store, "save_held", "save"),
            ]
            for obj, attr, name in methods:
                setattr(obj, attr, self.wrap(name, getattr(obj, attr)))
            yield
        finally:
            for name, fn in module_originals.items():
                setattr(modules[name], name, fn)

    def take(self) -> dict[str, list[float]]:
        taken, self.times = dict(self.times), defaultdict(list)
        return taken


def make_snapshot(
    net: Net, version: int, pod: int, expire_ms: int, ports: tuple[int, int]
) -> pb.Snapshot:
    """The workload's snapshot: both HAProxy pods as peers, SRV_1 on backend pod `pod`,
    health checks on with the default settings (as `compute` renders `check: "true"`)."""
    http_port, peer_port = ports
    shop = backend(BACKEND, [(net.backend_pods[pod][1], BACKEND_PORT)], count=SLOTS)
    shop.check.CopyFrom(
        pb.HealthCheck(
            interval_ms=healthcheck.DEFAULT_INTERVAL_MS,
            rise=healthcheck.DEFAULT_RISE,
            fall=healthcheck.DEFAULT_FALL,
        )
    )
    shop.persistence.expire_ms = expire_ms
    peers = [(name, ip, peer_port) for name, ip in net.haproxy_pods]
    return snapshot(peers, [shop], http_port=http_port, routes=[(HOST, BACKEND)], version=version)


def answers(haproxy: str, port: int, pod: str, client: str) -> bool:
    try:
        return http_get(haproxy, HOST, client, port, timeout=2) == pod
    except (OSError, RuntimeError):
        return False


def wait_serving(haproxy: str, port: int, pod: str, client: str, timeout: float = 10.0) -> float:
    """Probe (new connection each) until `pod` answers; the time it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if answers(haproxy, port, pod, client):
            return time.perf_counter()
    raise TimeoutError(f"{pod} not serving through {haproxy}:{port} within {timeout:.0f}s")


def load_main(haproxy: str, port: int, client: str) -> None:
    """Load process: requests until SIGTERM, then print ok/failed counts as JSON."""
    stopping = False

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    ok = failed = 0
    errors: list[str] = []
    print(json.dumps({"started": True}), flush=True)
    while not stopping:
        try:
            http_get(haproxy, HOST, client, port, timeout=5)
            ok += 1
        except (OSError, RuntimeError) as e:
            failed += 1
            if len(errors) < 5:
                errors.append(repr(e)[:200])
    print(json.dumps({"ok": ok, "failed": failed, "errors": errors}), flush=True)


class Bench:
    def __init__(self, net: Net, work: Path, agents: list[Agent], ports: tuple[int, int]) -> None:
        self.net = net
        self.work = work
        self.agents = agents
        self.ports = ports
        self.version = 0
        self.pod = 0
        self.expire = 0
        self.phases = Phases()

    def apply_all(self, expected: ApplyPath | None = None) -> float:
        """Apply the next snapshot to every agent; the first one timed to serving."""
        self.version += 1
        snap = make_snapshot(self.net, self.version, self.pod, EXPIRES_MS[self.expire], self.ports)
        first, *others = self.agents
        self.phases.enabled = True
        start = time.perf_counter()
        result = first.applier.apply(snap)
        self.phases.enabled = False
        self.phases.times["apply_call"].append(time.perf_counter() - start)
        if not result.ok or (expected is not None and result.kind is not expected):
            raise RuntimeError(f"{first.pod}: {result} (expected {expected})")
        pod = self.net.backend_pods[self.pod][0]
        serving = wait_serving(first.ip, self.ports[0], pod, self.net.probe_client) - start
        for agent in others:
            other = agent.applier.apply(snap)
            if not other.ok:
                raise RuntimeError(f"{agent.pod}: {other}")
        return serving

    def measure(self, path: str, changes: int, gap: float, load: bool = True) -> dict[str, Any]:
        """`changes` samples of one path, `gap` seconds apart, under a load loop."""
        first = self.agents[0]
        kind = ApplyPath.RUNTIME if path == "runtime" else ApplyPath.RELOAD
        reloads_before = first.haproxy.show_proc().reloads
        timings: list[float] = []
        kept: list[float] = []
        loader = (
            Child(
                [
                    *(sys.executable, "-m", "tests.bench.haproxy", "load"),
                    *(first.ip, str(self.ports[0]), self.net.load_client),
                ],
                self.work / f"load-{path}-{gap}.log",
            )
            if load
            else None
        )
        counts: dict[str, Any] = {"ok": 0, "failed": 0, "errors": []}
        try:
            if loader is not None:
                loader.read(timeout=30)
                time.sleep(0.2)
            self.phases.take()
            for _ in range(changes):
                self.pod = 1 - self.pod
                if path == "reload":
                    self.expire = 1 - self.expire
                timings.append(self.apply_all(kind))
                kept.append(self.pinned_kept())
                time.sleep(gap)
            if loader is not None:
                loader.proc.send_signal(signal.SIGTERM)
                counts = loader.read(timeout=30)
        finally:
            if loader is not None:
                loader.stop()
        reloads = first.haproxy.show_proc().reloads - reloads_before
        return {
            "timings": timings,
            "phases": self.phases.take(),
            "reloads": reloads,
            "pinned_kept": kept,
            **counts,
        }

    def pin_clients(self) -> None:
        """Stick-table entries of clients that never come back: they survive only if the
        table does (peers local resync on reload, or no reload at all)."""
        first = self.agents[0]
        for client in self.net.pinned_clients:
            http_get(first.ip, HOST, client, self.ports[0])
        wait_until(lambda: self.pinned_kept() == 1.0, 10, "the pinned clients' entries")

    def pinned_kept(self) -> float:
        """Fraction of the pinned clients' entries in haproxy-a's stick table now."""
        entries = table_entries(self.agents[0].haproxy.runtime(f"show table {BACKEND}"))
        pinned = self.net.pinned_clients
        return sum(1 for c in pinned if c in entries) / len(pinned)


@contextmanager
def output_to(path: Path) -> Iterator[None]:
    """Point this process's stdout/stderr at a file while HAProxy is spawned: the
    supervisor's HAProxy inherits them and would otherwise fill the benchmark's output."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {
    "haproxy.runtime.received_to_serving_p50": "< 20 ms",
    "haproxy.*.failed_requests": "0",
    "haproxy.*.pinned_entries_kept": "1 (every entry)",
}


def run(
    quick: bool = False,
    runtime_changes: int = 0,
    reload_changes: int = 0,
    octet: int = OCTET,
    sync_wait: float | None = None,
    binary: str | None = None,
) -> list[Result]:
    """The figures; `sync_wait` overrides the agent's peer-resync bound (smoke tests only),
    `binary` the HAProxy (default: the one on PATH)."""
    binary = binary or haproxy_binary()
    if binary is None:
        raise RuntimeError("haproxy not found")
    runtime_changes = runtime_changes or (6 if quick else 50)
    reload_changes = reload_changes or (3 if quick else 20)
    back_to_back = 2 if quick else 5
    net = Net(octet)
    work = Path(tempfile.mkdtemp(prefix="bench-haproxy-"))
    found: dict[str, dict[str, Any]] = {}
    backends = Backends()
    try:
        with ExitStack() as stack:
            for name, address in net.backend_pods:
                backends.start(name, address, BACKEND_PORT)
            http_port, peer_port = free_port(net.ip("1.1")), free_port(net.ip("1.1"))
            agents: list[Agent] = []
            for name, address in net.haproxy_pods:
                agents.append(Agent.create(work, name, address, binary, sync_wait))
                stack.callback(agents[-1].supervisor.stop)
            bench = Bench(net, work, agents, (http_port, peer_port))
            wait = agents[0].haproxy.sync_wait
            with output_to(work / "haproxy.log"):
                bench.apply_all()  # first start of both HAProxy
            for agent in agents:
                first_pod = net.backend_pods[0][0]
                serving = partial(answers, agent.ip, http_port, first_pod, net.probe_client)
                wait_until(serving, 10, agent.pod)
            bench.pin_clients()
            stack.enter_context(bench.phases.installed(agents[0]))
            found["runtime"] = bench.measure("runtime", runtime_changes, RUNTIME_GAP_S)
            time.sleep(wait)  # quiet before the first reload sample
            found["reload"] = bench.measure("reload", reload_changes, wait + 0.5)
            found["reload_back_to_back"] = bench.measure(
                "reload", back_to_back, BACK_TO_BACK_GAP_S, load=False
            )
            for path, data in found.items():
                log(
                    f"haproxy: {path} p50 {median(data['timings']) * 1000:.1f} ms, "
                    f"failed {data['failed']} {data['errors']}"
                )
    finally:
        backends.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    return results_of(found, binary, wait)


def _median_ms(
    prefix: str, params: dict[str, Any], name: str, values: list[float], what: str = ""
) -> Result:
    extra = {"what": what} if what else {}
    return Result(f"{prefix}.{name}", median(values) * 1000, "ms", params | extra)


def results_of(found: dict[str, dict[str, Any]], binary: str, sync_wait: float) -> list[Result]:
    results: list[Result] = []
    for path in ("runtime", "reload"):
        data = found[path]
        timings, phases = data["timings"], data["phases"]
        params = {
            "changes": len(timings),
            "requests_ok": data["ok"],
            "reloads": data["reloads"],
            "load": "new conn/request",
            "agent": "nodeagent Applier",
            "health_checks": True,
        }

        ms = partial(_median_ms, f"haproxy.{path}", params)
        validate = phases.get("validate", [])
        results += [
            ms("received_to_serving_p50", timings),
            Result(
                f"haproxy.{path}.received_to_serving_p99",
                percentile(timings, 99) * 1000,
                "ms",
                params,
            ),
            ms("apply_call_p50", phases["apply_call"], "Applier.apply() (the agent ACKs after)"),
            Result(f"haproxy.{path}.failed_requests", data["failed"], "requests", params),
            Result(
                f"haproxy.{path}.pinned_entries_kept",
                min(data["pinned_kept"]),
                "fraction",
                params | {"what": "worst sample: pinned clients' stick entries right after"},
            ),
        ]
        if validate:  # the runtime path does not validate (only checked server lines change)
            results += [
                ms(
                    "apply_to_serving_p50",
                    [t - v for t, v in zip(timings, validate, strict=True)],
                    "received to serving without the haproxy -c validation",
                ),
                ms("validate_p50", validate, f"haproxy -c ({binary}) inside apply"),
            ]
        for phase in PHASES:
            if phase != "validate" and phases.get(phase):
                results.append(ms(f"phase.{phase}_p50", phases[phase], "step inside apply"))
    burst = found["reload_back_to_back"]
    burst_params = {
        "changes": len(burst["timings"]),
        "gap_s": BACK_TO_BACK_GAP_S,
        "sync_wait_s": sync_wait,
    }
    results += [
        Result(
            "haproxy.reload.back_to_back_p50",
            median(burst["timings"]) * 1000,
            "ms",
            burst_params,
        ),
        Result(
            "haproxy.reload.back_to_back_wait_peers_synced_p50",
            median(burst["phases"].get("wait_peers_synced", [0.0])) * 1000,
            "ms",
            burst_params,
        ),
    ]
    ratio = median(found["reload"]["timings"]) / median(found["runtime"]["timings"])
    results.append(
        Result("haproxy.reload_over_runtime", ratio, "ratio", {"what": "p50 reload / p50 runtime"})
    )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", nargs="?", choices=["load"])
    parser.add_argument("haproxy", nargs="?")
    parser.add_argument("port", nargs="?", type=int)
    parser.add_argument("client", nargs="?")
    args = parser.parse_args(argv)
    if args.command == "load":
        load_main(args.haproxy, args.port, args.client)
        return
    from tests.bench.__main__ import main as bench_main

    raise SystemExit(bench_main(["haproxy"]))


if __name__ == "__main__":
    main()
