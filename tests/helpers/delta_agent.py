"""A minimal agent that materializes `SnapshotDelta`s itself, for the server's delta tests.

It follows the contract in proto/peerplane/v1/peerplane.proto (and docs/design.md, "The
agent stream") without the real agent (`nodeagent/`): apply a delta to the snapshot it
holds, re-serialize each part deterministically, and compare the SHA-256 over the parts'
digests (contract 2) with `to_content_hash`. The content hash is computed here from
protobuf itself, not with the control plane's code, so the test checks the server against
the rule rather than against itself.
"""

from __future__ import annotations

import hashlib

import grpc

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, Agent


class Unusable(Exception):
    """The delta cannot be applied: the agent Nacks it with resync."""


def digest(snapshot: pb.Snapshot) -> str:
    """The content hash as the proto defines it: the deterministic serialization (version
    and content hash unset) cut into parts in field order (workload; peers; each backend;
    the HTTP and TCP frontends; warnings; HTTP listeners; each certificate; TLS
    listeners; each route group), SHA-256 over the join of each part's SHA-256 digest."""
    s = snapshot

    def one(**fields: object) -> bytes:
        return pb.Snapshot(**fields).SerializeToString(deterministic=True)  # type: ignore[arg-type]

    parts = [
        one(workload=s.workload),
        one(peers=s.peers) if s.HasField("peers") else b"",
        *(one(backends=[b]) for b in s.backends),
        one(http_frontend=s.http_frontend, tcp_frontends=s.tcp_frontends)
        if s.HasField("http_frontend")
        else one(tcp_frontends=s.tcp_frontends),
        one(warnings=s.warnings),
        one(http_listeners=s.http_listeners),
        *(one(certificates=[c]) for c in s.certificates),
        one(tls_listeners=s.tls_listeners),
        *(one(route_groups=[g]) for g in s.route_groups),
    ]
    whole = pb.Snapshot()
    whole.CopyFrom(s)
    whole.version, whole.content_hash = 0, ""
    if b"".join(parts) != whole.SerializeToString(deterministic=True):
        raise Unusable("the parts do not join into the snapshot's serialization")
    joined = b"".join(hashlib.sha256(part).digest() for part in parts)
    return hashlib.sha256(joined).hexdigest()


def apply_delta(held: pb.Snapshot | None, delta: pb.SnapshotDelta) -> pb.Snapshot:
    """The snapshot `delta` makes of `held` (version and hash set); Unusable when `held`
    is not its base or the result's hash is not `to_content_hash`."""
    if held is None or held.content_hash != delta.from_content_hash:
        raise Unusable(f"do not hold {delta.from_content_hash[:12]}")
    result = pb.Snapshot()
    result.CopyFrom(held)
    backends = {b.name: b for b in held.backends}
    for name in delta.removed_backends:
        backends.pop(name, None)
    for backend in delta.backends:
        backends[backend.name] = backend
    del result.backends[:]
    result.backends.extend(backends[name] for name in sorted(backends))
    certificates = {c.name: c for c in held.certificates}
    for name in delta.removed_certificates:
        certificates.pop(name, None)
    for certificate in delta.certificates:
        certificates[certificate.name] = certificate
    del result.certificates[:]
    result.certificates.extend(certificates[name] for name in sorted(certificates))

    def key(group: pb.RouteGroup) -> str:
        return f"{group.listener}/{group.host}"

    groups = {key(g): g for g in held.route_groups}
    for name in delta.removed_route_groups:
        groups.pop(name, None)
    for group in delta.route_groups:
        groups[key(group)] = group
    del result.route_groups[:]
    result.route_groups.extend(groups[name] for name in sorted(groups))
    if delta.peers_changed:
        result.ClearField("peers")
        if delta.HasField("peers"):
            result.peers.CopyFrom(delta.peers)
    if delta.frontends_changed:
        result.ClearField("http_frontend")
        del result.tcp_frontends[:]
        del result.http_listeners[:]
        if delta.HasField("http_frontend"):
            result.http_frontend.CopyFrom(delta.http_frontend)
        result.tcp_frontends.extend(delta.tcp_frontends)
        result.http_listeners.extend(delta.http_listeners)
        del result.tls_listeners[:]
        result.tls_listeners.extend(delta.tls_listeners)
    if delta.warnings_changed:
        del result.warnings[:]
        result.warnings.extend(delta.warnings)
    result.workload = delta.workload
    result.version = delta.version
    result.content_hash = delta.to_content_hash
    if digest(result) != delta.to_content_hash:
        raise Unusable(f"result hash {digest(result)[:12]} is not {delta.to_content_hash[:12]}")
    return result


class DeltaAgent(Agent):
    """An agent stream that announces deltas and keeps what it was last sent, as the
    contract says: every snapshot or delta received is materialized at once."""

    def __init__(self, channel: grpc.aio.Channel, pod: str, *, accepts_deltas: bool = True) -> None:
        super().__init__(channel, pod, NS)
        self.accepts_deltas = accepts_deltas
        self.held: pb.Snapshot | None = None
        self.received: list[str] = []  # "snapshot" / "delta" / "in_sync" / "waiting"

    async def step(self) -> tuple[pb.ServerMessage, str]:
        """Read one message and materialize it; the message and "" or why it is unusable
        (a held snapshot that is not the delta's base keeps being held)."""
        return self.take(await self.recv_raw())

    def take(self, raw: bytes) -> tuple[pb.ServerMessage, str]:
        """Materialize one message read raw (see `step`)."""
        message = pb.ServerMessage.FromString(raw)
        kind = message.WhichOneof("message") or ""
        self.received.append(kind)
        if kind == "snapshot":
            assert digest(message.snapshot) == message.snapshot.content_hash
            self.held = message.snapshot
        elif kind == "delta":
            try:
                self.held = apply_delta(self.held, message.delta)
            except Unusable as error:
                return message, str(error)
        return message, ""

    async def answer(self, message: pb.ServerMessage, problem: str) -> None:
        """Ack, or Nack with resync when the delta was unusable."""
        if problem:
            nack = pb.Nack(nonce=message.nonce, error=problem, resync=True)
            await self.call.write(pb.AgentMessage(nack=nack))
            return
        held = self.held
        assert held is not None
        ack = pb.Ack(nonce=message.nonce, version=held.version, content_hash=held.content_hash)
        await self.call.write(pb.AgentMessage(ack=ack))
