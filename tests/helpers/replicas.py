"""Control-plane replicas on one Lease against the fake API server, and stream agents.

Shared by tests/kube/test_replicas.py and the failover benchmark (tests/bench/failover.py):
the small cluster (Service shop, two HAProxy pods of one DaemonSet), the `serve` flags of
a replica, its health and ListWorkloads, and `StreamAgent`, a minimal agent that ACKs
every snapshot, records what it held when, and (optionally) reconnects the way the real
agent does when its stream is lost.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nodeagent.stream.client import MAX_RECEIVE_BYTES
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.helpers.server_process import ServeProcess
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import config_map, endpoint_slice, pod, service

NS = "haproxy-system"
SHOP = "default_shop_http"
LEASE = "peerplane-controlplane"
# The real agent (nodeagent/stream/client.py): 0.5 s after a lost stream, then random
# exponential backoff (multiplier 0.5 s, at most 30 s) between failed attempts.
RECONNECT_PAUSE_S = 0.5
BACKOFF_MULTIPLIER_S = 0.5
BACKOFF_MAX_S = 30.0

Slots = dict[int, str]


def shop_cluster(endpoints: tuple[str, ...] = ("10.0.2.1", "10.0.2.2")) -> FakeKubeAPI:
    """A started fake API server: Service shop with `endpoints`, HAProxy pods haproxy-a
    and haproxy-b of DaemonSet haproxy, the settings ConfigMap (4 server slots)."""
    server = FakeKubeAPI().start()
    server.apply(service("shop"))
    server.apply(endpoint_slice("shop", dict.fromkeys(endpoints, True)))
    for name, ip in (("haproxy-a", "127.0.0.11"), ("haproxy-b", "127.0.0.12")):
        member = pod(name, ip, owner="haproxy", owner_kind="DaemonSet")
        server.apply(member)
    server.apply(config_map("haproxy-settings", server_slots="4"))
    return server


def serve_args(kubeconfig: Path, lease_s: float, *extra: str) -> tuple[str, ...]:
    """`controlplane serve` flags of one replica of the Lease in NS."""
    return (
        "--source=kubernetes",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect",
        f"--lease-duration={lease_s}",
        f"--lease-namespace={NS}",
        f"--configmap={NS}/haproxy-settings",
        *extra,
    )


@contextlib.contextmanager
def replicas(
    kubeconfig: Path, count: int, lease_s: float, *extra: str
) -> Iterator[list[ServeProcess]]:
    """`count` replicas on one Lease, each stopped by PID on the way out."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(ServeProcess(*serve_args(kubeconfig, lease_s, *extra)))
            for _ in range(count)
        ]


def health(address: str) -> str:
    """The gRPC health status name (SERVING, NOT_SERVING) or the call's error code."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0
            )
        except grpc.RpcError as error:
            return str(error.code().name)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def replica_of(address: str) -> pb.ListWorkloadsResponse:
    with grpc.insecure_channel(address) as channel:
        stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
        reply: pb.ListWorkloadsResponse = stub.ListWorkloads(pb.ListWorkloadsRequest(), timeout=2)
        return reply


def role_of(address: str) -> str:
    """leader, follower, or "" when the replica does not answer."""
    try:
        return replica_of(address).replica.role
    except grpc.RpcError:
        return ""


def hashes(address: str) -> set[str]:
    return {w.content_hash for w in replica_of(address).workloads}


def shop_slots(snapshot: pb.Snapshot, backend: str = SHOP) -> Slots:
    """Slot index -> address of the enabled slots of the shop backend (or `backend`);
    none while the snapshot has no such backend."""
    found = [b for b in snapshot.backends if b.name == backend]
    if not found:
        return {}
    (shop,) = found
    return {s.index: s.address for s in shop.slots if s.enabled}


class Held(NamedTuple):
    """What an agent held from `at` on (a Snapshot, or InSync with what it had)."""

    at: float
    content_hash: str
    slots: Slots


class StreamAgent:
    """One agent: Hello (with the hash it holds), ACK every snapshot, record each.

    `reconnect` picks the address of the next attempt after a lost stream (None: no
    acceptable replica now); without it the agent stays down, and `ended` says why.
    `backend` is the backend whose slots are recorded.
    """

    def __init__(
        self,
        address: str,
        pod: str = "haproxy-a",
        reconnect: Callable[[], str | None] | None = None,
        backend: str = SHOP,
    ) -> None:
        self.pod = pod
        self.backend = backend
        self._reconnect = reconnect
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._out: queue.Queue[pb.AgentMessage | None] = queue.Queue()
        self._channel: grpc.Channel | None = None
        self.snapshots: list[Held] = []  # Snapshots and InSync answers, in order
        self.sessions: list[tuple[float, str]] = []  # (first answer at, replica address)
        self.losses: list[tuple[float, str]] = []  # (at, why) of established streams lost
        self.ended: str | None = None  # why the last stream ended
        self._thread = threading.Thread(target=self._run, args=(address,), daemon=True)
        self._thread.start()

    def _run(self, address: str | None) -> None:
        attempt = 0
        while not self._closing.is_set():
            if address is not None and self._session(address):
                if self._closing.is_set() or self._reconnect is None:
                    return
                attempt = 0
                self._closing.wait(RECONNECT_PAUSE_S)
            elif self._reconnect is None:
                return
            else:
                attempt += 1
                ceiling = min(BACKOFF_MAX_S, BACKOFF_MULTIPLIER_S * 2 ** (attempt - 1))
                self._closing.wait(random.uniform(0, ceiling))
            address = self._reconnect() if self._reconnect is not None else None

    def _hello(self) -> pb.AgentMessage:
        held = self.last()
        hello = pb.Hello(
            contract=CONTRACT,
            pod_namespace=NS,
            pod_name=self.pod,
            node_name="node",
            agent_version="t",
            applied_content_hash=held.content_hash,
            accepts_deltas=False,
        )
        return pb.AgentMessage(hello=hello)

    def _session(self, address: str) -> bool:
        """One stream; True when it was established (some answer came) and then ended."""
        out: queue.Queue[pb.AgentMessage | None] = queue.Queue()
        # The real agent's receive limit: a snapshot of thousands of backends passes gRPC's
        # 4 MiB default.
        channel = grpc.insecure_channel(
            address, options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)]
        )
        with self._lock:
            self._out, self._channel = out, channel
        if self._closing.is_set():
            channel.close()
            return False
        out.put(self._hello())
        established = False

        def requests() -> Iterator[pb.AgentMessage]:
            while (message := out.get()) is not None:
                yield message

        try:
            stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
            for message in stub.Stream(requests()):
                now = time.monotonic()
                if not established:
                    established = True
                    with self._lock:
                        self.sessions.append((now, address))
                self._take(message, now, out)
            self.ended = "stream ended"
        except grpc.RpcError as error:
            self.ended = error.code().name
        finally:
            out.put(None)
            channel.close()
        if established and not self._closing.is_set():
            with self._lock:
                self.losses.append((time.monotonic(), self.ended or ""))
        return established

    def _take(
        self, message: pb.ServerMessage, now: float, out: queue.Queue[pb.AgentMessage | None]
    ) -> None:
        kind = message.WhichOneof("message")
        if kind == "snapshot":
            snap = message.snapshot
            with self._lock:
                self.snapshots.append(Held(now, snap.content_hash, shop_slots(snap, self.backend)))
            ack = pb.Ack(nonce=message.nonce, version=snap.version, content_hash=snap.content_hash)
            out.put(pb.AgentMessage(ack=ack))
        elif kind == "in_sync":
            held = self.last()
            with self._lock:
                self.snapshots.append(Held(now, message.in_sync.content_hash, held.slots))

    def last(self) -> Held:
        with self._lock:
            return self.snapshots[-1] if self.snapshots else Held(0.0, "", {})

    def first_with(self, test: Callable[[Slots], bool], since: float = 0.0) -> float | None:
        """When the agent first held slots passing `test` (at or after `since`)."""
        with self._lock:
            return next((h.at for h in self.snapshots if h.at >= since and test(h.slots)), None)

    def first_holding(self, content_hash: str, since: float = 0.0) -> float | None:
        """When the agent first held `content_hash` (at or after `since`)."""
        with self._lock:
            return next(
                (h.at for h in self.snapshots if h.at >= since and h.content_hash == content_hash),
                None,
            )

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            out, channel = self._out, self._channel
        out.put(None)
        if channel is not None:
            channel.close()
        self._thread.join(5)


def slot_history(agents: list[StreamAgent]) -> dict[str, set[int]]:
    """Address -> every slot any agent ever saw it in (one each when no slot moved)."""
    seen: dict[str, set[int]] = {}
    for agent in agents:
        for held in agent.snapshots:
            for slot, address in held.slots.items():
                seen.setdefault(address, set()).add(slot)
    return seen
