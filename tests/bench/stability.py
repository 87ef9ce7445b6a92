"""Session stability: this design's sticky slots against the upstream approaches.

A backend of 20 pods goes through random scale-up, scale-down and restart events (a
restart replaces the pod: new pod, new IP). 1,000 clients are pinned: the hash of the
client IP picks a pod, and the client remembers the slot name (SRV_n) that pod has, as a
stick-table entry does. After each event a client whose pod still exists but now sits in
another slot is a broken session.

Approaches, all through the real `compute()`:
- design: one control plane computes with the previous assignment (sticky slots); midway
  it fails over to a new leader that loads the persisted assignment (JSON round trip).
  Every HAProxy replica applies that one computation's snapshots.
- upstream-resort: each replica sorts the endpoints and assigns SRV_1..n on every change
  (`compute(state, {})`, a computation with no history, is exactly that).
- upstream-dynamic: each replica keeps its own sticky slots (fills free slots without a
  reload) but starts from sorted order whenever it restarts.

Across replicas: replica A sees every event one by one; replica B sees them in random
batches of 1-4 (one computation per batch, as a slower watch delivers them) and restarts
midway. At every point where B has
caught up (same pods as A), the fraction of slots naming different pods is recorded
("settled"); after every event ("instant", B possibly lagging) too.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.compute import compute
from controlplane.ledger.codec import assignment_from_json, assignment_to_json
from controlplane.model import ClusterState
from controlplane.snapshot import BackendSlots
from tests.bench.common import Result, log, loopback_ip
from tests.helpers.builders import cluster, endpoint_slice, haproxy_pod, service

BACKEND = "default_shop_http"
APPROACHES = ("design", "upstream-resort", "upstream-dynamic")
SlotMap = dict[int, str]  # slot index -> pod IP
Assignment = Mapping[str, BackendSlots]


def _state(pods: list[str]) -> ClusterState:
    return cluster(
        [service("shop", annotations={"haproxy.org/source-ip-persistence": "true"})],
        [endpoint_slice("shop", pods)],
        [haproxy_pod("haproxy-a", "127.0.1.1")],
    )


def _slot_map(assignment: Assignment) -> SlotMap:
    backend = assignment.get(BACKEND)
    if backend is None:
        return {}
    return {slot: address for (address, _port), slot in backend.slots.items()}


class Replica:
    """Slot assignment as one computing party sees it."""

    def __init__(self, sticky: bool) -> None:
        self.sticky = sticky
        self.assignment: Assignment = {}

    def apply(self, pods: list[str]) -> SlotMap:
        previous = self.assignment if self.sticky else {}
        self.assignment = compute(_state(pods), previous).assignment
        return _slot_map(self.assignment)

    def restart(self) -> None:
        """Loses its in-memory state (the upstream replica: sorted order again)."""
        self.assignment = {}

    def fail_over(self) -> None:
        """A new leader: continues from the persisted assignment (JSON round trip)."""
        # Computed with the default now=0: freed slots are never reused here, and the
        # same clock reads the ledger back.
        restored, problems = assignment_from_json(assignment_to_json(self.assignment), 0.0)
        if problems:
            raise RuntimeError(f"persisted assignment unreadable: {problems}")
        self.assignment = restored


@dataclass
class Events:
    """A random event history over a pod set, and each step's pod list."""

    steps: list[list[str]]  # pods after each event (index 0: initial)
    kinds: list[str] = field(default_factory=list)


def make_events(pods: int, events: int, rng: random.Random) -> Events:
    used: set[int] = set()

    def fresh_ip() -> str:
        while True:
            index = rng.randrange(1, 60_000)
            if index not in used:
                used.add(index)
                return loopback_ip(index, base=0x7F_20_00_00)

    current = [fresh_ip() for _ in range(pods)]
    history = Events([list(current)])
    for _ in range(events):
        kind = rng.choice(("scale-up", "scale-down", "restart"))
        if kind == "scale-up" or (kind == "scale-down" and len(current) <= pods // 4):
            kind = "scale-up"
            current += [fresh_ip() for _ in range(rng.randint(1, 3))]
        elif kind == "scale-down":
            for _ in range(min(rng.randint(1, 3), len(current) - 1)):
                current.remove(rng.choice(current))
        else:
            current.remove(rng.choice(current))
            current.append(fresh_ip())
        history.steps.append(list(current))
        history.kinds.append(kind)
    return history


def _client_pod(client: str, pods: list[str]) -> str:
    ordered = sorted(pods)
    return ordered[zlib.crc32(client.encode()) % len(ordered)]


def session_breaks(
    maps: list[SlotMap], clients: list[str], steps: list[list[str]]
) -> tuple[int, int]:
    """(clients whose slot moved at least once while their pod survived, total moves)."""
    pinned: dict[str, tuple[str, int]] = {}
    broken: set[str] = set()
    moves = 0
    for slot_map, pods in zip(maps, steps, strict=True):
        slot_of = {address: slot for slot, address in slot_map.items()}
        for client in clients:
            held = pinned.get(client)
            if held is not None and held[0] in slot_of:
                pod, slot = held
                if slot_of[pod] != slot:
                    broken.add(client)
                    moves += 1
                    pinned[client] = (pod, slot_of[pod])
                continue
            pod = _client_pod(client, pods)  # new client, or its pod is gone: re-pinned
            pinned[client] = (pod, slot_of[pod])
    return len(broken), moves


def _difference(a: SlotMap, b: SlotMap) -> float:
    slots = set(a) | set(b)
    if not slots:
        return 0.0
    return sum(1 for s in slots if a.get(s) != b.get(s)) / len(slots)


def _batches(events: int, rng: random.Random) -> list[list[int]]:
    """Replica B's view: event indexes 1..events in batches of 1-4."""
    batches, i = [], 1
    while i <= events:
        size = rng.randint(1, 4)
        batch = list(range(i, min(events, i + size - 1) + 1))
        batches.append(batch)
        i += size
    return batches


def simulate(
    clients: int = 1000, pods: int = 20, events: int = 200, seed: int = 5
) -> dict[str, dict[str, float]]:
    """Per approach: broken_clients, slot_moves, settled/instant cross-replica fractions."""
    rng = random.Random(seed)
    history = make_events(pods, events, rng)
    client_ips = [loopback_ip(i, base=0x7F_30_00_00) for i in range(clients)]
    batches = _batches(events, rng)
    restart_at = events // 2
    out: dict[str, dict[str, float]] = {}
    for approach in APPROACHES:
        a = Replica(sticky=approach != "upstream-resort")
        maps_a: list[SlotMap] = []
        for i, pods_now in enumerate(history.steps):
            if approach == "design" and i == restart_at:
                a.fail_over()
            maps_a.append(a.apply(pods_now))
        broken, moves = session_breaks(maps_a, client_ips, history.steps)

        # Replica B: the design's agents apply the one control plane's snapshot at B's
        # pace; the upstream replicas compute themselves from B's own view.
        b = Replica(sticky=approach != "upstream-resort")
        maps_b: list[SlotMap] = [maps_a[0] if approach == "design" else b.apply(history.steps[0])]
        seen = 0
        restarted = False
        settled: list[float] = []
        for batch in batches:
            last = max(batch)
            if approach == "design":
                current = maps_a[last]
            else:
                if not restarted and last >= restart_at:
                    b.restart()
                    restarted = True
                # One computation per batch: a watch that delivered several changes at once.
                current = b.apply(history.steps[last])
            maps_b.extend([maps_b[-1]] * (last - seen - 1))
            maps_b.append(current)
            seen = last
            settled.append(_difference(maps_a[last], current))
        instant = [_difference(x, y) for x, y in zip(maps_a, maps_b, strict=True)]
        out[approach] = {
            "broken_clients": broken,
            "slot_moves": moves,
            "settled_mismatch": sum(settled) / len(settled),
            "settled_mismatch_max": max(settled),
            "instant_mismatch": sum(instant) / len(instant),
        }
    return out


# Targets (README, "Performance"): figure pattern -> target.
TARGETS = {
    "stability.design.broken_clients": "0",
    "stability.design.slot_moves": "0",
    "stability.design.settled_mismatch*": "0",
}


def run(quick: bool = False) -> list[Result]:
    clients, pods, events = (200, 20, 60) if quick else (1000, 20, 200)
    figures = simulate(clients, pods, events)
    params: dict[str, object] = {"clients": clients, "pods": pods, "events": events}
    results: list[Result] = []
    units = {
        "broken_clients": "clients",
        "slot_moves": "moves",
        "settled_mismatch": "fraction",
        "settled_mismatch_max": "fraction",
        "instant_mismatch": "fraction",
    }
    for approach, values in figures.items():
        for key, unit in units.items():
            results.append(Result(f"stability.{approach}.{key}", values[key], unit, params))
    log(f"stability: {figures}")
    return results


if __name__ == "__main__":
    from tests.bench.__main__ import main

    raise SystemExit(main(["stability"]))
