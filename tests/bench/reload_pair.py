"""Two peered HAProxy instances reloaded together: does a client pinned again right after
get the removed pod's server back?

The probe of the churn failure on 3.2.26 (seed 263481, docs/findings.md, "Persistence
under churn"): two instances, each driven by the agent's own `HAProxy` driver, a
`leastconn` TCP backend with `stick on src` (`srvkey addr`, a peered table), 4 servers
and 120 clients on their own source addresses. Each cycle:

1. 40 clients are pinned to one server (the others in `maint` on A for that moment), and
   both tables agree;
2. both instances are reloaded at the same moment from two threads (`HAProxy.reload()`,
   as two agents applying one slot-growth snapshot), and as soon as both returned:
3. the 40 clients ask through B (their entries are touched there), their server is put in
   `maint` on both, and they ask through A, which pins them again elsewhere;
4. both tables are watched for 2 s: an entry that named the new server and names the old
   one again (on A at any time) is "back"; then the 40 ask through B: an answer other
   than A's is a move.

Figures per installed HAProxy: cycles with an entry back, moves, cycles whose peer
session was not up when both reloads returned, and the reloads' median duration. Before
the agent waited for its peer sessions after a reload (40 cycles each, 2026-12-05): the
old server back in 2 cycles on 2.6.12 (52 moves), 3 on 3.0.11 (79), 1 on 3.2.26 (22);
after: none on each.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.haproxy.driver import HAProxy, command
from nodeagent.haproxy.parse import parse_peer_sessions
from tests.bench.common import Result, log
from tests.helpers.fleet import Backends, stop_process, table_entries, tcp_get
from tests.helpers.haproxy_env import loopback_net
from tests.helpers.haproxy_versions import HAProxyBinary, installed

SERVERS = 4
CLIENTS = 120
PINNED = 40
FRONTEND_PORT = 15432
SERVER_PORT = 15433
PEER_PORT = 10000
WATCH_S = 2.0
NAMES = ("a", "b")

TARGETS = {
    "reload_pair.*.old_server_back": "0",
    "reload_pair.*.moves": "0",
}


def _config(tmp: Path, net: str, me: str, generation: int) -> str:
    """One instance's config; `generation` changes it (spare slots), as slot growth does."""
    servers = [
        f"  server SRV_{i} {net}.{10 + i}:{SERVER_PORT} id {i}" for i in range(1, SERVERS + 1)
    ]
    spares = [
        f"  server SRV_{i} 127.0.0.1:1 id {i} disabled"
        for i in range(SERVERS + 1, SERVERS + 1 + generation % 3)
    ]
    own = NAMES.index(me) + 1
    return "\n".join(
        [
            "global",
            f"  localpeer {me}",
            f"  stats socket {tmp}/{me}.rt mode 600 level admin expose-fd listeners",
            "  hard-stop-after 60s",
            "peers localinstance",
            *(f"  peer {n} {net}.{i + 1}:{PEER_PORT}" for i, n in enumerate(NAMES)),
            "defaults",
            "  mode tcp",
            "  option redispatch",
            "  retries 3",
            "  timeout connect 1s",
            "  timeout client 5s",
            "  timeout server 5s",
            "frontend fe",
            f"  bind {net}.{own}:{FRONTEND_PORT}",
            "  default_backend db",
            "backend db",
            "  balance leastconn",
            "  stick on src",
            "  stick-table type ip size 1m expire 30m srvkey addr peers localinstance",
            *servers,
            *spares,
            "",
        ]
    )


@dataclass
class Pair:
    """Two peered instances and their servers, on one loopback net."""

    binary: HAProxyBinary
    tmp: Path
    net: str = field(default_factory=loopback_net)
    haproxy: dict[str, HAProxy] = field(default_factory=dict)
    generation: int = 0

    def address(self, name: str) -> str:
        return f"{self.net}.{NAMES.index(name) + 1}"

    def server(self, index: int) -> str:
        return f"{self.net}.{10 + index}:{SERVER_PORT}"

    def clients(self) -> list[str]:
        return [f"{self.net}.{100 + i}" for i in range(CLIENTS)]

    def write_configs(self) -> None:
        for name in NAMES:
            (self.tmp / f"{name}.cfg").write_text(
                _config(self.tmp, self.net, name, self.generation)
            )

    def run(self, name: str, cmd: str) -> str:
        return command(self.haproxy[name].runtime_socket, cmd)

    def table(self, name: str) -> dict[str, str]:
        return table_entries(self.run(name, "show table db"))

    def ask(self, name: str, clients: list[str]) -> dict[str, str]:
        def one(client: str) -> str:
            try:
                return tcp_get(self.address(name), client, FRONTEND_PORT, 5)
            except OSError as e:
                return f"!{e}"

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            return dict(zip(clients, pool.map(one, clients), strict=True))

    def sessions_up(self, name: str) -> bool:
        peers = parse_peer_sessions(self.run(name, "show peers"))
        return all(p.established for p in peers)


@contextlib.contextmanager
def _pair(binary: HAProxyBinary) -> Iterator[Pair]:
    backends = Backends()
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="bench-reload-pair-") as tmp:
        pair = Pair(binary, Path(tmp))
        try:
            for i in range(1, SERVERS + 1):
                host, port = pair.server(i).split(":")
                backends.start(f"db-{i}", host, int(port), "tcp")
            pair.write_configs()
            for name in NAMES:
                master = str(pair.tmp / f"{name}.m")
                argv = [binary.path, "-W", "-S", master, "-f", str(pair.tmp / f"{name}.cfg")]
                processes.append(
                    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
                pair.haproxy[name] = HAProxy(master, str(pair.tmp / f"{name}.rt"), binary.path)
            for hx in pair.haproxy.values():
                hx.wait_running(10)
            deadline = time.monotonic() + 30
            while not all(hx.peers_synced() for hx in pair.haproxy.values()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the pair's first resync did not finish within 30 s")
                time.sleep(0.1)
            yield pair
        finally:
            for process in processes:
                stop_process(process)
            backends.stop_all()


@dataclass
class Cycle:
    sessions_down: bool
    back: int  # entries that named the new server and the old one again
    moves: int
    reload_s: list[float]


def _pin(pair: Pair, victim: int, rng: random.Random) -> list[str]:
    """Pin a third of the clients to `victim` through A; wait until B agrees."""
    others = [i for i in range(1, SERVERS + 1) if i != victim]
    for i in others:
        pair.run("a", f"set server db/SRV_{i} state maint")
    subset = rng.sample(pair.clients(), PINNED)
    answers = pair.ask("a", subset)
    for i in others:
        pair.run("a", f"set server db/SRV_{i} state ready")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and pair.table("a") != pair.table("b"):
        time.sleep(0.05)
    return [c for c in subset if answers[c] == f"db-{victim}"]


def _reload_both(pair: Pair) -> list[float]:
    pair.generation += 1
    pair.write_configs()
    took: list[float] = []
    start = threading.Barrier(len(NAMES))

    def reload(name: str) -> None:
        start.wait()
        begun = time.monotonic()
        pair.haproxy[name].reload()
        took.append(time.monotonic() - begun)

    with concurrent.futures.ThreadPoolExecutor(len(NAMES)) as pool:
        list(pool.map(reload, NAMES))
    return took


def _cycle(pair: Pair, victim: int, rng: random.Random) -> Cycle:
    pinned = _pin(pair, victim, rng)
    took = _reload_both(pair)
    down = not all(pair.sessions_up(name) for name in NAMES)
    pair.ask("b", pinned)  # touched on B, as a check through B would
    for name in NAMES:
        pair.run(name, f"set server db/SRV_{victim} state maint")
    again = pair.ask("a", pinned)
    old = pair.server(victim)
    seen_new: set[tuple[str, str]] = set()
    back: set[tuple[str, str]] = set()
    deadline = time.monotonic() + WATCH_S
    while time.monotonic() < deadline:
        for name in NAMES:
            table = pair.table(name)
            for client in pinned:
                key = (name, client)
                if table.get(client) != old:
                    seen_new.add(key)
                elif name == "a" or key in seen_new:
                    back.add(key)
        time.sleep(0.03)
    through_b = pair.ask("b", pinned)
    moves = sum(through_b[c] != again[c] for c in pinned)
    for name in NAMES:
        pair.run(name, f"set server db/SRV_{victim} state ready")
    return Cycle(down, len(back), moves, took)


def measure(binary: HAProxyBinary, cycles: int, seed: int) -> list[Cycle]:
    rng = random.Random(seed)
    found: list[Cycle] = []
    with _pair(binary) as pair:
        pair.ask("a", pair.clients())
        for i in range(cycles):
            cycle = _cycle(pair, i % SERVERS + 1, rng)
            found.append(cycle)
            if cycle.back or cycle.moves or cycle.sessions_down:
                log(f"  cycle {i}: {cycle}")
    return found


def run(quick: bool = False) -> list[Result]:
    cycles = 6 if quick else 40
    seed = random.SystemRandom().randrange(1 << 20)
    results: list[Result] = []
    for binary in installed():
        found = measure(binary, cycles, seed)
        params = {"cycles": cycles, "pinned": PINNED, "seed": seed}
        back = sum(1 for c in found if c.back)
        moves = sum(c.moves for c in found)
        down = sum(1 for c in found if c.sessions_down)
        durations = [t for c in found for t in c.reload_s]
        log(
            f"reload pair {binary.version}: {cycles} cycles, old server back in {back}, "
            f"{moves} moves, session down after both reloads in {down}, reload median "
            f"{statistics.median(durations):.2f}s max {max(durations):.2f}s (seed {seed})"
        )
        series = binary.series
        results += [
            Result(f"reload_pair.{series}.old_server_back", back, "cycles", params),
            Result(f"reload_pair.{series}.moves", moves, "clients", params),
            Result(f"reload_pair.{series}.sessions_down_after_reload", down, "cycles", params),
            Result(
                f"reload_pair.{series}.reload_median",
                round(statistics.median(durations), 3),
                "s",
                {**params, "max": round(max(durations), 3)},
            ),
        ]
    return results
