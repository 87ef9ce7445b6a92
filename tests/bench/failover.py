"""Leader failover with every replica serving: the gap agents see, beside single-server mode.

The fake API server (tests/kubeapi), three real `controlplane serve --leader-elect`
replicas on one Lease with the default timings (15 s lease, renewed every 2 s, candidates
retry every 2 s), and simple stream agents (tests/helpers/replicas.py: full snapshots, ACK
everything) on every replica. Each round: SIGKILL the leader, remove an endpoint at once
and add one 0.5 s later, wait until every agent holds the new state, restart the killed
replica. Times are from the SIGKILL, for three groups of agents:

- on followers: they keep their stream (every replica serves);
- on the killed leader: they lose it and reconnect like the real agent (0.5 s, then
  random exponential backoff) to any surviving replica, as through the Service;
- single-server mode (only the leader serves, as earlier versions did): also on the
  killed leader, but they reconnect only to the Lease holder, as when only the leader was
  Ready and nobody else served.

Sanity, raised as an exception: an agent on a follower lost its stream, or an address's
slot changed (before/after each round, and anything any agent ever saw).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.cli.flags import DEFAULT_LEASE_DURATION_S
from tests.bench.common import Result, log
from tests.helpers.replicas import (
    LEASE,
    NS,
    StreamAgent,
    hashes,
    health,
    role_of,
    serve_args,
    shop_cluster,
    slot_history,
)
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import endpoint_slice, write_kubeconfig

REPLICAS = 3
AGENTS_PER_REPLICA = 4  # plus as many single-server-mode agents on the leader
ADD_AFTER_S = 0.5
FIRST = ("10.0.3.1", "10.0.3.2", "10.0.3.3")
GROUPS = ("followers", "leader", "single")
HEADINGS = {
    "followers": "on followers",
    "leader": "on the killed leader",
    "single": "single-server mode",
}


class FailoverError(AssertionError):
    """A broken promise of the design (a stream lost on a follower, a moved slot)."""


@dataclass
class Figures:
    """Samples over rounds and agents, seconds from the SIGKILL (losses: counts)."""

    removal: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GROUPS})
    addition: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GROUPS})
    reconnect: dict[str, list[float]] = field(default_factory=lambda: {g: [] for g in GROUPS})
    losses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    agents: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    takeover: list[float] = field(default_factory=list)


def _lease_holder(api: FakeKubeAPI) -> str:
    lease = api.get("Lease", NS, LEASE) or {}
    return str(lease.get("spec", {}).get("holderIdentity", ""))


class Fleet:
    """The replicas, started and restarted by PID inside one ExitStack."""

    def __init__(self, stack: contextlib.ExitStack, kubeconfig: Path, lease_s: float) -> None:
        self._stack = stack
        self._args = serve_args(kubeconfig, lease_s, "--max-streams-per-peer=0")
        self.processes = [self._start() for _ in range(REPLICAS)]

    def _start(self) -> ServeProcess:
        return self._stack.enter_context(ServeProcess(*self._args))

    def alive(self) -> list[str]:
        return [
            p.address for p in self.processes if p.process is not None and p.process.poll() is None
        ]

    def settled(self) -> ServeProcess:
        """Wait until every replica serves the same content under one leader; the leader."""
        addresses = [p.address for p in self.processes]
        wait_until(
            lambda: all(health(a) == "SERVING" for a in addresses),
            60,
            "every replica ready",
            step=0.02,
        )
        wait_until(
            lambda: sum(role_of(a) == "leader" for a in addresses) == 1, 60, "one leader", step=0.02
        )
        wait_until(
            lambda: len({frozenset(hashes(a)) for a in addresses}) == 1,
            30,
            "same content",
            step=0.02,
        )
        (leader,) = [p for p in self.processes if role_of(p.address) == "leader"]
        return leader

    def restart(self, dead: ServeProcess) -> None:
        self.processes[self.processes.index(dead)] = self._start()


def _rotation(fleet: Fleet) -> Callable[[], str | None]:
    """The Service: the next surviving replica, round robin."""
    counter = itertools.count()

    def pick() -> str | None:
        alive = fleet.alive()
        return alive[next(counter) % len(alive)] if alive else None

    return pick


def _lease_holder_only(fleet: Fleet) -> Callable[[], str | None]:
    """Single-server mode: only the Lease holder was Ready, so only it is reachable."""

    def pick() -> str | None:
        return next((a for a in fleet.alive() if role_of(a) == "leader"), None)

    return pick


@contextlib.contextmanager
def _agents(fleet: Fleet, leader: ServeProcess) -> Iterator[dict[str, list[StreamAgent]]]:
    groups: dict[str, list[StreamAgent]] = {g: [] for g in GROUPS}
    try:
        for process in fleet.processes:
            group = "leader" if process is leader else "followers"
            for i in range(AGENTS_PER_REPLICA):
                pod = ("haproxy-a", "haproxy-b")[i % 2]
                groups[group].append(StreamAgent(process.address, pod, _rotation(fleet)))
        for i in range(AGENTS_PER_REPLICA):
            pod = ("haproxy-a", "haproxy-b")[i % 2]
            groups["single"].append(StreamAgent(leader.address, pod, _lease_holder_only(fleet)))
        yield groups
    finally:
        for agent in itertools.chain.from_iterable(groups.values()):
            agent.close()


def _round(
    api: FakeKubeAPI, fleet: Fleet, current: list[str], fresh: str, lease_s: float, figures: Figures
) -> dict[str, int]:
    """One failover; returns the final address -> slot (checked against before)."""
    leader = fleet.settled()
    (content,) = hashes(leader.address)
    with _agents(fleet, leader) as groups:
        every = list(itertools.chain.from_iterable(groups.values()))
        wait_until(
            lambda: all(a.last().content_hash == content for a in every),
            30,
            "agents in sync",
            step=0.02,
        )
        before = {address: slot for slot, address in groups["followers"][0].last().slots.items()}
        holder = _lease_holder(api)
        removed = current.pop(0)
        assert leader.process is not None
        os.kill(leader.process.pid, signal.SIGKILL)  # dies holding the Lease
        killed = time.monotonic()
        api.apply(endpoint_slice("shop", dict.fromkeys(current, True)))
        time.sleep(max(0.0, killed + ADD_AFTER_S - time.monotonic()))
        current.append(fresh)
        api.apply(endpoint_slice("shop", dict.fromkeys(current, True)))

        def done() -> bool:
            if figures.takeover[-1] < 0 and _lease_holder(api) not in ("", holder):
                figures.takeover[-1] = time.monotonic() - killed
            return all(set(a.last().slots.values()) == set(current) for a in every)

        figures.takeover.append(-1.0)
        wait_until(done, lease_s + 60, "every agent on the new state", step=0.02)
        wait_until(
            lambda: len({a.last().content_hash for a in every}) == 1,
            30,
            "one final hash",
            step=0.02,
        )
        for group, agents in groups.items():
            figures.agents[group] += len(agents)
            figures.losses[group] += sum(len(a.losses) for a in agents)
            for agent in agents:
                gone = agent.first_with(lambda slots: removed not in slots.values(), killed)
                came = agent.first_with(lambda slots: fresh in slots.values(), killed)
                assert gone is not None and came is not None
                figures.removal[group].append(gone - killed)
                figures.addition[group].append(came - killed)
                back = [at for at, _ in agent.sessions if at >= killed]
                if back:
                    figures.reconnect[group].append(back[0] - killed)
        after = {address: slot for slot, address in groups["followers"][0].last().slots.items()}
        check([a.losses for a in groups["followers"]], slot_history(every), before, after)
        final = groups["followers"][0].last().content_hash
    survivors = [p.address for p in fleet.processes if p is not leader]
    wait_until(
        lambda: all(hashes(a) == {final} for a in survivors),
        30,
        "replicas on the final hash",
        step=0.02,
    )
    fleet.restart(leader)
    return after


def check(
    follower_losses: Sequence[Sequence[tuple[float, str]]],
    history: Mapping[str, set[int]],
    before: Mapping[str, int],
    after: Mapping[str, int],
) -> None:
    """Raise FailoverError if an agent on a follower lost its stream, or a slot moved:
    an address seen in two slots (`history`), or in another slot after than before."""
    lost = [losses for losses in follower_losses if losses]
    if lost:
        raise FailoverError(f"agents on followers lost their stream: {lost}")
    moved = {address: sorted(slots) for address, slots in history.items() if len(slots) > 1}
    moved.update(
        {
            address: [before[address], slot]
            for address, slot in after.items()
            if address in before and before[address] != slot
        }
    )
    if moved:
        raise FailoverError(f"slots moved (address: slots): {moved}")


def measure(rounds: int, lease_s: float = DEFAULT_LEASE_DURATION_S) -> Figures:
    """`rounds` leader SIGKILLs against three replicas; every sample of every agent."""
    figures = Figures()
    api = shop_cluster(FIRST)
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            kubeconfig = write_kubeconfig(api.url, Path(tmp) / "kubeconfig")
            fleet = Fleet(stack, kubeconfig, lease_s)
            current = list(FIRST)
            seen: dict[str, int] = {}
            for number in range(rounds):
                fresh = f"10.0.3.{len(FIRST) + number + 1}"
                after = _round(api, fleet, current, fresh, lease_s, figures)
                check([], {}, seen, after)  # and across rounds
                seen.update(after)
                log(f"round {number + 1}/{rounds}: takeover {figures.takeover[-1]:.1f}s")
    finally:
        api.stop()
    return figures


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{_median(values):.2f} s (max {max(values):.2f})"


def side_by_side(figures: Figures) -> str:
    """The comparison as printed: one column per group of agents."""
    rows = [
        ("agents (all rounds)", *(str(figures.agents[g]) for g in GROUPS)),
        ("streams lost", *(str(figures.losses[g]) for g in GROUPS)),
        ("stream back (reconnected)", *(_cell(figures.reconnect[g]) for g in GROUPS)),
        ("removal delivered", *(_cell(figures.removal[g]) for g in GROUPS)),
        ("addition delivered (in sync)", *(_cell(figures.addition[g]) for g in GROUPS)),
    ]
    head = ("from the leader's SIGKILL", *(HEADINGS[g] for g in GROUPS))
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    )


# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {
    "failover.followers.stream_losses": "0",
    "failover.followers.removal": "within the debounce (~0.1 s)",
}


def run(quick: bool = False) -> list[Result]:
    rounds = 1 if quick else 3
    lease_s = DEFAULT_LEASE_DURATION_S
    figures = measure(rounds, lease_s)
    timings = f"lease {lease_s:g}s, renew/retry {lease_s * 2 / 15:g}s, debounce 0.1s"
    log(f"failover, {REPLICAS} replicas, {rounds} round(s), {timings}:")
    log(side_by_side(figures))
    params = {"rounds": rounds, "replicas": REPLICAS, "lease_s": lease_s}
    results = [Result("failover.lease_takeover", _median(figures.takeover), "s", params)]
    for group in GROUPS:
        found = {**params, "agents": figures.agents[group], "what": HEADINGS[group]}
        results += [
            Result(f"failover.{group}.stream_losses", figures.losses[group], "streams", found),
            Result(
                f"failover.{group}.removal",
                _median(figures.removal[group]),
                "s",
                {**found, "max": round(max(figures.removal[group]), 3)},
            ),
            Result(
                f"failover.{group}.addition",
                _median(figures.addition[group]),
                "s",
                {**found, "max": round(max(figures.addition[group]), 3)},
            ),
        ]
        if figures.reconnect[group]:
            results.append(
                Result(
                    f"failover.{group}.reconnect",
                    _median(figures.reconnect[group]),
                    "s",
                    {**found, "max": round(max(figures.reconnect[group]), 3)},
                )
            )
    return results
