"""Moved clients on real HAProxy: this design's sticky slots vs the upstream re-sort.

Per installed HAProxy version, two real HAProxy instances driven by the agent's own apply
path (`Agent` of tests/bench/haproxy.py: Applier, HAProxy driver, Supervisor) serve one
HTTP Service with `balance source` and source-IP persistence. The same seeded history of
500 scale-up, scale-down and restart events (tests/bench/stability.py's `make_events`, 20
pods) goes through the real `compute()` for each:

- design: the previous assignment is carried over (sticky slots, freed slots kept out
  of use while the stick-table expire runs; one event per simulated minute);
- upstream-resort: `compute(state, {})`, no history: sort the endpoints, then SRV_1..n.

1,000 clients, each on its own 127.x source address, are pinned by real requests. After each
event a client whose pod still exists is "moved" when its stick entry (HAProxy's own
`show table`) names a server that HAProxy (`show servers state`) now points at another pod;
a client whose pod went away, or whose entry names a disabled server, sends a real request
and is pinned again by the answer. Every 100 events and at the end every client sends a
real request, and the answer is checked against that reading (`model_errors`).
"""

from __future__ import annotations

import random
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.compute import BackendSlots, compute
from controlplane.model import ClusterState
from controlplane.publish import encode
from tests.bench.common import Result, log
from tests.bench.haproxy import Agent
from tests.bench.stability import make_events
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service, settings
from tests.helpers.fleet import Backends, table_entries
from tests.helpers.haproxy_versions import installed
from tests.helpers.persistence import BACKEND_PORT, HOST, HTTP_PORT, ask_all, servers_by_slot

OCTET = 43  # 127.43.x.y: apart from the tests and the other benchmarks
BACKEND = "default_shop_http"
EVENT_INTERVAL_S = 60.0  # simulated time between events (the design's quarantine clock)
CHECK_EVERY = 100
APPROACHES = ("design", "upstream-resort")


def _state(pods: list[str], haproxy: tuple[str, str]) -> ClusterState:
    notes = {
        "haproxy.org/hosts": HOST,
        "haproxy.org/load-balance": "source",
        "haproxy.org/source-ip-persistence": "true",
    }
    return cluster(
        [service("shop", annotations=notes)],
        [endpoint_slice("shop", pods, port=BACKEND_PORT)],
        [haproxy_pod(*haproxy)],
        config=settings(**{"http-port": str(HTTP_PORT), "server-slots": "42"}),
    )


@dataclass
class Run:
    """One approach on one HAProxy: its slot history, pins and counts."""

    name: str
    agent: Agent
    sticky: bool
    assignment: dict[str, BackendSlots] = field(default_factory=dict)
    pins: dict[str, str] = field(default_factory=dict)  # client -> pod address
    moved: set[str] = field(default_factory=set)
    moves: int = 0
    requests: int = 0
    model_errors: int = 0
    reloads: int = 0

    def apply(self, pods: list[str], step: int) -> None:
        previous = self.assignment if self.sticky else {}
        state = _state(pods, (self.agent.pod, self.agent.ip))
        result = compute(state, previous, now=step * EVENT_INTERVAL_S)
        self.assignment = dict(result.assignment)
        (content,) = encode(result.workloads).values()
        outcome = self.agent.applier.apply(content.message(version=step + 1))
        if not outcome.ok:
            raise RuntimeError(f"{self.name}: apply failed: {outcome.error}")
        self.reloads += outcome.kind is not None and outcome.kind.value == "reload"

    def ask(self, clients: list[str]) -> dict[str, str]:
        self.requests += len(clients)
        answers = ask_all(self.agent.ip, [("shop", "http", c) for c in clients])
        failed = {c: a for (_, c), a in answers.items() if a.startswith("!")}
        if failed:
            raise RuntimeError(f"{self.name}: {len(failed)} failed requests, e.g. {failed}")
        return {c: a for (_, c), a in answers.items()}

    def predicted(self) -> dict[str, str | None]:
        """Where each client's next request goes, read from HAProxy: the address of the
        server its stick entry names (None: no entry, or the server is disabled)."""
        runtime = self.agent.haproxy.runtime
        servers = servers_by_slot(Path(self.agent.haproxy.runtime_socket), BACKEND)
        table = table_entries(runtime(f"show table {BACKEND}"))
        out: dict[str, str | None] = {}
        for client in self.pins:
            server = table.get(client, "")
            name = f"SRV_{server}" if server.isdigit() else server
            state = servers.get(name, "disabled")
            out[client] = None if state == "disabled" else state.rsplit(":", 1)[0]
        return out

    def observe(self, pods: set[str]) -> None:
        """Count clients moved off a surviving pod; re-pin the others by a request."""
        repin = [c for c in self.pins if self.pins[c] not in pods]
        for client, now in self.predicted().items():
            pinned = self.pins[client]
            if pinned in pods and now != pinned:
                self.moved.add(client)
                self.moves += 1
                if now is None:
                    repin.append(client)
                else:
                    self.pins[client] = now
        self.pins.update(self.ask(repin))

    def verify(self) -> None:
        """Every client asks: the answer must be what the table and servers said."""
        predicted = self.predicted()
        for client, answer in self.ask(list(self.pins)).items():
            self.model_errors += predicted[client] != answer
            self.pins[client] = answer


def run_version(
    binary: str, version: str, clients: int, events: int, seed: int, octet: int = OCTET
) -> list[Result]:
    """Both approaches on one HAProxy version; `octet` keeps a smoke run apart."""
    rng = random.Random(seed)
    history = make_events(20, events, rng)
    client_ips = [f"127.{octet}.{8 + i // 250}.{i % 250 + 1}" for i in range(clients)]
    work = Path(tempfile.mkdtemp(prefix="bench-persistence-"))
    backends = Backends(poll_interval=0.05)
    runs: list[Run] = []
    try:
        with ExitStack() as stack:
            for i, name in enumerate(APPROACHES):
                agent = Agent.create(work, f"haproxy-{i}", f"127.{octet}.1.{i + 1}", binary, 0.5)
                stack.callback(agent.supervisor.stop)
                runs.append(Run(name, agent, sticky=name == "design"))
            serving: set[str] = set()
            for step, pods in enumerate(history.steps):
                for ip in set(pods) - serving:
                    backends.start(ip, ip, BACKEND_PORT)
                for run in runs:
                    run.apply(pods, step)
                    if step == 0:
                        run.pins.update(run.ask(client_ips))
                    else:
                        run.observe(set(pods))
                    if step % CHECK_EVERY == 0 or step == events:
                        run.verify()
                for ip in serving - set(pods):
                    backends.stop(ip)
                serving = set(pods)
    finally:
        backends.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    params = {"haproxy": version, "clients": clients, "events": events, "pods": 20, "seed": seed}
    results = []
    for run in runs:
        extra = {**params, "moves": run.moves, "reloads": run.reloads, "requests": run.requests}
        extra["model_errors"] = run.model_errors
        prefix = f"persistence.haproxy{version}.{run.name}"
        results.append(Result(f"{prefix}.moved_clients", len(run.moved), "clients", extra))
        log(
            f"persistence haproxy {version} {run.name}: clients={clients} events={events} "
            f"moved_clients={len(run.moved)} moves={run.moves} reloads={run.reloads} "
            f"requests={run.requests} model_errors={run.model_errors}"
        )
    return results


# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {"persistence.*.design.moved_clients": "0"}


def run(quick: bool = False, seed: int = 7) -> list[Result]:
    clients, events = (100, 20) if quick else (1000, 500)
    binaries = installed()
    if not binaries:
        raise RuntimeError("no haproxy installed")
    results: list[Result] = []
    for binary in binaries:
        results += run_version(binary.path, binary.version, clients, events, seed)
    return results


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["persistence"]))
