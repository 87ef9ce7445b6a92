"""Per-stream agent state and the registry of connected agents.

A session lives exactly as long as its stream: reconnecting starts from a fresh session
(xDS rule), seeded only with what the agent reports in its Hello. The registry is what
ListAgents and ListWorkloads read; it also lets tests await a state change instead of
sleeping.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from peerplane.v1 import peerplane_pb2 as pb


@dataclass(frozen=True, slots=True)
class Sent:
    """A snapshot sent on a stream and not yet answered."""

    nonce: str
    version: int
    content_hash: str
    since: float = 0.0  # monotonic: publication, or the stream's start if later


@dataclass(slots=True)
class AgentSession:
    """What the server knows about one connected agent (one stream)."""

    stream_id: int
    pod: str  # "namespace/name"
    node_name: str
    agent_version: str
    peer_address: str
    connected_at: datetime
    workload: str = ""
    acked_version: int = 0
    acked_hash: str = ""
    # Hash of the last snapshot sent (or confirmed with InSync): never sent twice in a row.
    sent_hash: str = ""
    last_nonce: str = ""  # the only nonce an Ack or Nack may carry
    pending: Sent | None = None
    # The last Nacked snapshot: the agent may retry it and Ack the same nonce later (a
    # reload that failed on a port still held), as long as nothing newer was sent.
    nacked: Sent | None = None
    last_nack_error: str = ""
    last_nack_version: int = 0
    waiting_reason: str = ""  # last Waiting reason sent; "" when serving
    answered: bool = False  # the Hello got its answer
    ignored_messages: int = 0  # stale Acks/Nacks, extra Hellos
    identity: str = ""  # the authenticated caller (token username), "" without auth
    opened_at: float = field(default_factory=time.monotonic)
    _nonces: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def next_nonce(self) -> str:
        self.last_nonce = str(next(self._nonces))
        return self.last_nonce

    def to_proto(self) -> pb.AgentStatus:
        return pb.AgentStatus(
            agent=self.pod,
            node_name=self.node_name,
            workload=self.workload,
            peer_address=self.peer_address,
            acked_version=self.acked_version,
            acked_content_hash=self.acked_hash,
            pending_version=self.pending.version if self.pending else 0,
            last_nack_error=self.last_nack_error,
            last_nack_version=self.last_nack_version,
            connected_since=self.connected_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
            agent_version=self.agent_version,
        )


class AgentRegistry:
    """Connected agents by stream id; notifies waiters on every change."""

    def __init__(self) -> None:
        self._sessions: dict[int, AgentSession] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()

    def open(self, hello: pb.Hello, peer_address: str, now: datetime | None = None) -> AgentSession:
        session = AgentSession(
            stream_id=next(self._ids),
            pod=f"{hello.pod_namespace}/{hello.pod_name}",
            node_name=hello.node_name,
            agent_version=hello.agent_version,
            peer_address=peer_address,
            connected_at=now or datetime.now(UTC),
            acked_version=hello.applied_version if hello.applied_content_hash else 0,
            acked_hash=hello.applied_content_hash,
        )
        self._sessions[session.stream_id] = session
        return session

    def close(self, session: AgentSession) -> None:
        self._sessions.pop(session.stream_id, None)

    def sessions(self, workload: str = "") -> list[AgentSession]:
        """Sessions (of one workload when given), sorted by agent then connection time."""
        found = [s for s in self._sessions.values() if not workload or s.workload == workload]
        return sorted(found, key=lambda s: (s.pod, s.stream_id))

    async def changed(self) -> None:
        """Wake `wait_until` callers: call after mutating a session."""
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait until `predicate()` holds after some session change; TimeoutError if not."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(predicate)
