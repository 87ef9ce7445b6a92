"""Admission of an agent stream, before any protocol state exists (docs/design.md,
"The agent stream").

In order: the rate of stream opens per peer host (`ratelimit`, generous: a fleet behind
one NAT address shares it), the per-peer stream cap, the bearer token (when
authentication is on), the Hello (first message, in time, every field bounded and clean),
the token's binding to the very pod the Hello names, and the rate of stream opens per
agent (host and pod: a reconnect loop is refused before it costs a snapshot). Each failure
is a `Refused` carrying the gRPC status and a reason that never echoes an untrusted value;
the stream logs, counts and aborts with it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass

import grpc

from controlplane.server.auth import Authenticator, Denied, Identity
from controlplane.server.peers import PeerStreams
from controlplane.server.ratelimit import PeerRateLimit
from peerplane.parts import CONTRACT
from peerplane.runtime.untrusted import clean
from peerplane.v1 import peerplane_pb2 as pb

# Longest value accepted per Hello field (Kubernetes: namespace 63, pod and node names
# 253). Longer is refused with INVALID_ARGUMENT before the value is logged or stored.
HELLO_LIMITS = {
    "pod_namespace": 63,
    "pod_name": 253,
    "node_name": 253,
    "applied_content_hash": 128,
    "agent_version": 128,
}


def hello_problem(hello: pb.Hello) -> str | None:
    """Why this Hello is refused, or None. The reason never echoes the value."""
    if not hello.pod_namespace or not hello.pod_name:
        return "Hello needs pod_namespace and pod_name"
    for name, limit in HELLO_LIMITS.items():
        value: str = getattr(hello, name)
        if len(value) > limit:
            return f"Hello {name} is {len(value)} characters long (at most {limit})"
        if clean(value, limit) != value:
            return f"Hello {name} contains control characters or backslashes"
    return None


# The per-host bucket before anything is read: this many times the per-agent rate and
# burst, so a fleet of agents behind one address (NAT, a proxy) starts and reconnects.
HOST_RATE_FACTOR = 16.0
HOST_BURST_FACTOR = 64


def _too_fast(limit: PeerRateLimit, key: str, host: str, agent: str = "") -> None:
    """Refused with RESOURCE_EXHAUSTED and a retry hint when `key` opens too fast."""
    wait = limit.take(key)
    if wait > 0:
        who = agent or host
        raise Refused(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{who} opens streams too fast (limit {limit.rate_per_s:g}/s, burst "
            f"{limit.burst}): retry in {wait:.1f} s",
            peer=host,
            agent=agent or None,
            logged=limit.first_refusal(key),
            retry_after_s=wait,
        )


def binding_problem(identity: Identity, hello: pb.Hello) -> str | None:
    """Why this token may not speak for the pod the (valid) Hello names, or None."""
    named = f"{hello.pod_namespace}/{hello.pod_name}"
    if not identity.pod:
        return f"token of {identity.username} is not bound to a pod (Hello names {named})"
    if identity.pod != named:
        return f"token of pod {identity.pod} cannot speak for pod {named}"
    return None


def contract_problem(hello: pb.Hello) -> str | None:
    """Why this agent cannot read what this control plane sends (its contract is older
    than `peerplane.parts.CONTRACT`), or None: it is refused rather than sent snapshots it
    would misread (route rules it would not see, a content hash it would compute another
    way)."""
    if hello.contract >= CONTRACT:
        return None
    return (
        f"agent too old: it reads snapshot contract {hello.contract}, this control plane"
        f" sends contract {CONTRACT} (route rules in route groups, the content hash over"
        " the parts' digests); upgrade the node agent DaemonSet to this control plane's"
        " version"
    )


class Refused(Exception):
    """The stream is not admitted. `peer`/`agent` go to the log when set; `logged` and
    `counted` say whether the refusal is logged and counted in the refusal metric (a
    stream that never sent a Hello is neither; an invalid Hello is logged only)."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: str,
        *,
        peer: str | None = None,
        agent: str | None = None,
        logged: bool = True,
        counted: bool = True,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s  # sent as the retry hint, when set
        self.code = code
        self.reason = reason
        self.peer = peer
        self.agent = agent
        self.logged = logged
        self.counted = counted


@dataclass(frozen=True, slots=True)
class Admitted:
    """An admitted stream: it holds one of its host's stream slots until released."""

    host: str
    hello: pb.Hello
    identity: Identity | None  # None without authentication


class Admission:
    """Admits streams; `release` every `Admitted` when its stream ends."""

    def __init__(
        self,
        authenticator: Authenticator | None,
        *,
        max_streams_per_peer: int = 0,
        hello_timeout_s: float = 30.0,
        opens: PeerRateLimit | None = None,
        host_opens: PeerRateLimit | None = None,
    ) -> None:
        """`opens`: stream opens per agent (peer host and pod); `host_opens` per peer host
        before anything is read (by default `opens` scaled for many agents on one host)."""
        self._authenticator = authenticator
        self._opens = opens if opens is not None else PeerRateLimit(0)
        self._host_opens = (
            host_opens
            if host_opens is not None
            else self._opens.scaled(HOST_RATE_FACTOR, HOST_BURST_FACTOR)
        )
        self._peers = PeerStreams(max_streams_per_peer)
        self._hello_timeout_s = hello_timeout_s

    async def admit(
        self,
        host: str,
        metadata: Iterable[tuple[str, str | bytes]] | None,
        requests: AsyncIterator[pb.AgentMessage],
    ) -> Admitted:
        """Cap, token, Hello, binding; raises Refused (holding no slot) at the first
        failure."""
        _too_fast(self._host_opens, host, host)
        if not self._peers.acquire(host):
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many streams from {host} (limit {self._peers.limit})",
                peer=host,
            )
        try:
            identity = await self._authenticate(host, metadata)
            hello = await self._read_hello(requests)
            if identity is not None:
                problem = binding_problem(identity, hello)
                if problem is not None:
                    agent = f"{hello.pod_namespace}/{hello.pod_name}"
                    raise Refused(
                        grpc.StatusCode.PERMISSION_DENIED, problem, peer=host, agent=agent
                    )
            agent = f"{hello.pod_namespace}/{hello.pod_name}"
            _too_fast(self._opens, f"{host} {agent}", host, agent)
            problem = contract_problem(hello)
            if problem is not None:
                raise Refused(grpc.StatusCode.FAILED_PRECONDITION, problem, peer=host, agent=agent)
        except BaseException:
            self._peers.release(host)
            raise
        return Admitted(host, hello, identity)

    def release(self, admitted: Admitted) -> None:
        self._peers.release(admitted.host)

    async def _authenticate(
        self, host: str, metadata: Iterable[tuple[str, str | bytes]] | None
    ) -> Identity | None:
        if self._authenticator is None:
            return None
        try:
            return await self._authenticator.authenticate(metadata)
        except Denied as denied:
            raise Refused(denied.code, denied.message, peer=host) from denied

    async def _read_hello(self, requests: AsyncIterator[pb.AgentMessage]) -> pb.Hello:
        try:
            async with asyncio.timeout(self._hello_timeout_s):
                first = await anext(requests)
        except StopAsyncIteration:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "stream closed before Hello",
                logged=False,
                counted=False,
            ) from None
        except TimeoutError:
            raise Refused(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "no Hello received in time",
                logged=False,
                counted=False,
            ) from None
        if not first.HasField("hello"):
            kind = first.WhichOneof("message") or "an empty message"
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first message must be a Hello, got {kind}",
                logged=False,
                counted=False,
            )
        problem = hello_problem(first.hello)
        if problem is not None:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, problem, counted=False)
        return first.hello
