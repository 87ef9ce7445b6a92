"""Persistence under slot reuse, on real peered HAProxy instances
(docs/findings.md, "Why entries keep naming a freed slot").

Two agent-managed HAProxy instances share a `stick on src` table through peers; the slots
come from the real computation. Each round removes a backend pod that has pinned clients
the way a rollout does: one instance applies the removal first, the pod's clients are sent
through both while the other still runs the old configuration, then the other applies it.
That leaves stick entries naming the freed slot on both instances (docs/design.md, "Slots").
A new pod is then added. Checked every round, through both instances:

- no client is sent to the new pod by a stick entry written before it existed (the new pod
  never takes a slot that entries may name): reusing the freed slot at once fails this;
- a client whose entries on both instances name a slot holding a live pod is served by that
  pod.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from controlplane.compute import Computer
from controlplane.publish import encode_one
from controlplane.snapshot import BackendSlots
from nodeagent.config.changes import ApplyPath
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import WORKLOAD, cluster, endpoint_slice, haproxy_pod, service
from tests.helpers.fleet import Backends, http_get, table_entries, unix_command
from tests.helpers.haproxy_env import Instance, free_port, loopback_net, running_instance, snapshot
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

HOST = "web.example.com"
BACKEND = "default_web_http"
PORT = 8888
CLIENTS = 120
PODS = 6
ROUNDS = 15
ANNOTATIONS = {
    "haproxy.org/hosts": HOST,
    "haproxy.org/load-balance": "source",
    "haproxy.org/source-ip-persistence": "true",
    "haproxy.org/server-slots": "8",
}


@dataclass
class Cluster:
    """The backend pods (name -> address) and the real computation over them."""

    net: str
    instances: tuple[Instance, Instance]
    http_port: int
    peer_port: int
    pods: dict[str, str] = field(default_factory=dict)
    computer: Computer = field(default_factory=Computer)
    assignment: dict[str, BackendSlots] = field(default_factory=dict)
    version: int = 0

    def compute(self) -> pb.Snapshot:
        """The next snapshot for the current pods, slots from the real computation."""
        state = cluster(
            services=[service("web", annotations=ANNOTATIONS)],
            slices=[endpoint_slice("web", sorted(self.pods.values()), port=PORT)],
            pods=[haproxy_pod(i.pod, i.ip) for i in self.instances],
        )
        result = self.computer.compute(state, self.assignment, now=time.time())
        self.assignment = dict(result.assignment)
        (computed,) = encode_one(result.workloads[WORKLOAD]).message().backends
        self.version += 1
        peers = [(i.pod, i.ip, self.peer_port) for i in self.instances]
        return snapshot(
            peers, [computed], self.http_port, routes=[(HOST, BACKEND)], version=self.version
        )

    def slot_pods(self, snap: pb.Snapshot) -> dict[str, str]:
        """Server name -> pod name, for the enabled slots of `snap`."""
        by_address = {address: name for name, address in self.pods.items()}
        (b,) = snap.backends
        return {s.server_name: by_address[s.address] for s in b.slots if s.enabled}


def apply(instance: Instance, snap: pb.Snapshot) -> bool:
    """Apply `snap`; True when it took a reload. After a reload, wait for the new worker to
    have learnt the table from the old one: a request that comes before is balanced as if
    it had no entry, whatever the slots (a reload matter, not a slot-reuse one)."""
    result = instance.applier.apply(snap)
    assert result.ok, result.error
    if result.kind is not ApplyPath.RELOAD:
        return False
    wait_until(instance.haproxy.peers_synced, 10, f"{instance.pod}'s new worker to resync")
    return True


def table(instance: Instance) -> dict[str, str]:
    """Client address -> server name its stick entry names."""
    return table_entries(unix_command(instance.dir / "runtime.sock", f"show table {BACKEND}"))


def settled(a: Instance, b: Instance) -> dict[str, dict[str, str]]:
    """Both tables once peer updates have landed: unchanged for 0.5 s (an update can take
    longer than 0.2 s to reach the other instance). They need not be equal: two updates
    of one entry that cross on the way leave each instance with the other's."""
    seen: list[tuple[dict[str, str], dict[str, str]]] = []

    def still() -> bool:
        seen.append((table(a), table(b)))
        return len(seen) >= 2 and seen[-2] == seen[-1]

    wait_until(still, 15, "stick tables to settle", step=0.5)
    return {a.pod: seen[-1][0], b.pod: seen[-1][1]}


def pinned_to(
    client: str, tables: dict[str, dict[str, str]], slot_pod: dict[str, str]
) -> str | None:
    """The live pod every instance's entry for `client` names, if they agree on one (a
    crossed update may leave one naming the freed slot: the client is then unpinned)."""
    pods = {slot_pod.get(entries.get(client) or "") for entries in tables.values()}
    pod = pods.pop() if len(pods) == 1 else None
    return pod


@contextlib.contextmanager
def running_cluster(tmp: Path, binary: str) -> Iterator[tuple[Cluster, Backends]]:
    net = loopback_net()
    backends = Backends()
    with (
        running_instance(tmp / "a", f"{net}.1", "haproxy-a", binary=binary) as a,
        running_instance(tmp / "b", f"{net}.2", "haproxy-b", binary=binary) as b,
    ):
        try:
            yield Cluster(net, (a, b), free_port(a.ip), free_port(a.ip)), backends
        finally:
            backends.stop_all()


def test_a_new_pod_never_inherits_stick_entries_of_a_freed_slot(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    rng = random.Random(11)
    client_net = loopback_net()
    clients = [f"{client_net}.{i}" for i in range(1, CLIENTS + 1)]
    pool = ThreadPoolExecutor(8)
    with running_cluster(tmp_path, haproxy_bin.path) as (fleet, backends), pool:
        a, b = fleet.instances

        def ask(instance: Instance, client: str) -> str:
            return http_get(instance.ip, HOST, client, port=fleet.http_port)

        def both(order: tuple[Instance, Instance], client: str) -> tuple[str, str]:
            return ask(order[0], client), ask(order[1], client)

        def ask_all(instance: Instance, some: list[str]) -> dict[str, str]:
            return dict(zip(some, pool.map(lambda c: ask(instance, c), some), strict=True))

        created = 0

        def new_pod() -> str:
            nonlocal created
            created += 1
            name, address = f"web-{created}", f"{fleet.net}.{10 + created}"
            backends.start(name, address, PORT)
            fleet.pods[name] = address
            return name

        for _ in range(PODS):
            new_pod()
        snap = fleet.compute()
        apply(a, snap)
        apply(b, snap)
        answers = ask_all(a, clients)
        wait_until(lambda: set(table(b)) == set(clients), 15, "B to learn A's entries")

        redispatched_moved = redispatched = reloads = 0
        for _ in range(ROUNDS):
            counts = {pod: list(answers.values()).count(pod) for pod in fleet.pods}
            victim = max(sorted(counts), key=lambda pod: counts[pod])
            mine = [c for c, pod in answers.items() if pod == victim]
            # A rollout: the endpoint goes, the pod still serves until both instances run
            # the new snapshot; one applies it first and the clients come meanwhile.
            del fleet.pods[victim]
            snap = fleet.compute()
            first, second = rng.sample([a, b], 2)
            apply(first, snap)
            during = dict(
                zip(mine, pool.map(both, [(first, second)] * len(mine), mine), strict=True)
            )
            apply(second, snap)
            backends.stop(victim)
            moved_to = {c: pair[0] for c, pair in during.items()}  # where the removal sent them
            assert victim not in moved_to.values()
            before = settled(a, b)
            slot_pod = fleet.slot_pods(snap)

            added = new_pod()
            snap = fleet.compute()
            new_server = next(s for s, pod in fleet.slot_pods(snap).items() if pod == added)
            for instance in (a, b):
                named = [c for c, server in before[instance.pod].items() if server == new_server]
                assert not named, (
                    f"{added} took {new_server} while {len(named)} stick entries on "
                    f"{instance.pod} still name it"
                )
            reloads += apply(a, snap)
            reloads += apply(b, snap)

            after = {}
            for instance in (a, b):
                after[instance.pod] = got = ask_all(instance, clients)
                for client, pod in got.items():
                    entry = before[instance.pod].get(client)
                    pinned = pinned_to(client, before, slot_pod)
                    if pinned is not None:
                        assert pod == pinned, f"{client} moved from live {pinned} to {pod}"
                    if pod == added:
                        assert entry != new_server, f"{client} sent to {added} by an old entry"
            answers = after[a.pod]
            for client, pod in moved_to.items():
                redispatched += 1
                redispatched_moved += any(got[client] != pod for got in after.values())
        print(
            f"\nHAProxy {haproxy_bin.version}: {ROUNDS} reuse rounds; clients redispatched by "
            f"a removal then answered by another pod after the next scale-up: "
            f"{redispatched_moved} of {redispatched}; slots now {_count(fleet)}, "
            f"{reloads} reloads on scale-up"
        )


def _count(fleet: Cluster) -> int:
    return fleet.assignment[BACKEND].count
