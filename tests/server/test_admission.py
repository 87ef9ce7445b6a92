"""Stream admission by table: Hello validation, the token's pod binding, and the order
cap -> token -> Hello -> binding, without gRPC (docs/design.md, "The agent stream").
The same refusals over real streams are in server/test_auth.py and
shared/test_untrusted_strings.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import grpc
import pytest

from controlplane.server.admission import (
    HELLO_LIMITS,
    Admission,
    Refused,
    binding_problem,
    hello_problem,
)
from controlplane.server.auth import Authenticator, Denied, Identity
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import bearer, run

NS = "haproxy-system"
GOOD = pb.Hello(contract=CONTRACT, pod_namespace=NS, pod_name="haproxy-a", node_name="node-a")


def hello(**fields: str) -> pb.Hello:
    message = pb.Hello()
    message.CopyFrom(GOOD)
    for name, value in fields.items():
        setattr(message, name, value)
    return message


def old_agent() -> pb.Hello:
    """GOOD as an agent from before contract numbers says it: no contract."""
    message = hello()
    message.ClearField("contract")
    return message


HELLOS = [
    ("valid", GOOD, None),
    ("no namespace", hello(pod_namespace=""), "Hello needs pod_namespace and pod_name"),
    ("no pod name", hello(pod_name=""), "Hello needs pod_namespace and pod_name"),
    *[
        (
            f"{name} one past its limit",
            hello(**{name: "x" * (limit + 1)}),
            f"Hello {name} is {limit + 1} characters long (at most {limit})",
        )
        for name, limit in HELLO_LIMITS.items()
    ],
    *[
        (f"{name} at its limit", hello(**{name: "x" * limit}), None)
        for name, limit in HELLO_LIMITS.items()
    ],
    (
        "newline in the pod name",
        hello(pod_name="haproxy-a\n2026 forged"),
        "Hello pod_name contains control characters or backslashes",
    ),
    (
        "backslash in the agent version",
        hello(agent_version="v1\\x1b"),
        "Hello agent_version contains control characters or backslashes",
    ),
    ("empty optional fields", hello(node_name="", agent_version=""), None),
]


@pytest.mark.parametrize(
    ("message", "problem"), [row[1:] for row in HELLOS], ids=[row[0] for row in HELLOS]
)
def test_hello_problem(message: pb.Hello, problem: str | None) -> None:
    assert hello_problem(message) == problem


POD_TOKEN = Identity(f"system:serviceaccount:{NS}:haproxy", NS, "haproxy", "haproxy-a")
BINDINGS = [
    ("token bound to the named pod", POD_TOKEN, GOOD, None),
    (
        "token of another pod",
        POD_TOKEN,
        hello(pod_name="haproxy-b"),
        f"token of pod {NS}/haproxy-a cannot speak for pod {NS}/haproxy-b",
    ),
    (
        "same pod name in another namespace",
        POD_TOKEN,
        hello(pod_namespace="edge"),
        f"token of pod {NS}/haproxy-a cannot speak for pod edge/haproxy-a",
    ),
    (
        "a user's token, bound to no pod",
        Identity("alice"),
        GOOD,
        f"token of alice is not bound to a pod (Hello names {NS}/haproxy-a)",
    ),
    (
        "a service account token without a pod",
        Identity(f"system:serviceaccount:{NS}:haproxy", NS, "haproxy"),
        GOOD,
        f"token of system:serviceaccount:{NS}:haproxy is not bound to a pod "
        f"(Hello names {NS}/haproxy-a)",
    ),
]


@pytest.mark.parametrize(
    ("identity", "message", "problem"),
    [row[1:] for row in BINDINGS],
    ids=[row[0] for row in BINDINGS],
)
def test_binding_problem(identity: Identity, message: pb.Hello, problem: str | None) -> None:
    assert binding_problem(identity, message) == problem


class Reviewer:
    """A TokenReviewer answering from a table; counts reviews."""

    def __init__(self) -> None:
        self.reviews = 0

    def review(self, token: str, audiences: Sequence[str]) -> Identity:
        self.reviews += 1
        if token != "token-a":
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, "invalid token: unknown")
        return POD_TOKEN


async def messages(*items: pb.AgentMessage, hang: bool = False) -> AsyncIterator[pb.AgentMessage]:
    for item in items:
        yield item
    if hang:
        await asyncio.Event().wait()


def first(message: pb.Hello) -> AsyncIterator[pb.AgentMessage]:
    return messages(pb.AgentMessage(hello=message))


REFUSALS = [
    # id, token, requests, code, reason, (logged, counted), agent
    (
        "no token",
        "",
        lambda: first(GOOD),
        grpc.StatusCode.UNAUTHENTICATED,
        "no bearer token in the call metadata",
        (True, True),
        None,
    ),
    (
        "invalid token",
        "forged",
        lambda: first(GOOD),
        grpc.StatusCode.PERMISSION_DENIED,
        "invalid token: unknown",
        (True, True),
        None,
    ),
    (
        "stream closed before Hello",
        "token-a",
        lambda: messages(),
        grpc.StatusCode.INVALID_ARGUMENT,
        "stream closed before Hello",
        (False, False),
        None,
    ),
    (
        "no Hello in time",
        "token-a",
        lambda: messages(hang=True),
        grpc.StatusCode.DEADLINE_EXCEEDED,
        "no Hello received in time",
        (False, False),
        None,
    ),
    (
        "first message not a Hello",
        "token-a",
        lambda: messages(pb.AgentMessage(ack=pb.Ack(nonce="1"))),
        grpc.StatusCode.INVALID_ARGUMENT,
        "the first message must be a Hello, got ack",
        (False, False),
        None,
    ),
    (
        "invalid Hello",
        "token-a",
        lambda: first(hello(pod_name="")),
        grpc.StatusCode.INVALID_ARGUMENT,
        "Hello needs pod_namespace and pod_name",
        (True, False),
        None,
    ),
    (
        "agent from before contract 2",
        "token-a",
        lambda: first(old_agent()),
        grpc.StatusCode.FAILED_PRECONDITION,
        "agent too old: it reads snapshot contract 0, this control plane sends contract 2"
        " (route rules in route groups, the content hash over the parts' digests); upgrade"
        " the node agent DaemonSet to this control plane's version",
        (True, True),
        f"{NS}/haproxy-a",
    ),
    (
        "token of another pod",
        "token-a",
        lambda: first(hello(pod_name="haproxy-b")),
        grpc.StatusCode.PERMISSION_DENIED,
        f"token of pod {NS}/haproxy-a cannot speak for pod {NS}/haproxy-b",
        (True, True),
        f"{NS}/haproxy-b",
    ),
]


@pytest.mark.parametrize(
    ("token", "requests", "code", "reason", "reported", "agent"),
    [row[1:] for row in REFUSALS],
    ids=[row[0] for row in REFUSALS],
)
def test_refusals_hold_no_stream_slot(
    token: str,
    requests: object,
    code: grpc.StatusCode,
    reason: str,
    reported: tuple[bool, bool],
    agent: str | None,
) -> None:
    admission = Admission(Authenticator(Reviewer()), max_streams_per_peer=1, hello_timeout_s=0.05)

    async def body() -> None:
        with pytest.raises(Refused) as refused:
            await admission.admit("127.0.0.1", bearer(token), requests())  # type: ignore[operator]
        assert (refused.value.code, refused.value.reason) == (code, reason)
        assert (refused.value.logged, refused.value.counted) == reported
        # Counted refusals name the peer host in the log, as before the split.
        peer = "127.0.0.1" if refused.value.counted else None
        assert (refused.value.peer, refused.value.agent) == (peer, agent)
        # The refused stream gave its slot back: the host's one stream is admitted.
        admitted = await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD))
        assert admitted.identity == POD_TOKEN and admitted.hello == GOOD

    run(body())


def test_the_cap_is_checked_first_and_released_with_the_stream() -> None:
    reviewer = Reviewer()
    admission = Admission(Authenticator(reviewer), max_streams_per_peer=1)

    async def body() -> None:
        held = await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD))
        with pytest.raises(Refused) as refused:
            await admission.admit("127.0.0.1", bearer("forged"), first(GOOD))
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.reason == "too many streams from 127.0.0.1 (limit 1)"
        assert reviewer.reviews == 1  # refused before its token was reviewed
        other_host = await admission.admit("127.0.0.2", bearer("token-a"), first(GOOD))
        admission.release(held)
        await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD))
        admission.release(other_host)

    run(body())


def test_without_authentication_any_valid_hello_is_admitted() -> None:
    async def body() -> None:
        admitted = await Admission(None).admit("::1", None, first(GOOD))
        assert (admitted.host, admitted.hello, admitted.identity) == ("::1", GOOD, None)

    run(body())


def test_stream_opens_are_rate_limited_per_peer_and_logged_once() -> None:
    """No reconnect rate limit: 8 streams reconnecting in a tight loop got 3,626 full
    snapshots (3.4 GB), 7.9 s of CPU and 11,276 log lines in 20 s. A token bucket per
    agent (host and pod) refuses opens past the burst with RESOURCE_EXHAUSTED and a retry
    hint, before any snapshot, logged once per agent per interval; a more generous one per
    host refuses a flood before the token is reviewed."""
    from controlplane.server.ratelimit import PeerRateLimit

    now = [100.0]
    opens = PeerRateLimit(2.0, 3, log_every_s=60.0, clock=lambda: now[0])
    hosts = PeerRateLimit(4.0, 6, log_every_s=60.0, clock=lambda: now[0])
    reviewer = Reviewer()
    admission = Admission(Authenticator(reviewer), opens=opens, host_opens=hosts)

    async def body() -> None:
        for _ in range(3):  # the agent's burst
            admission.release(await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD)))
        refusals = []
        for _ in range(3):  # the same agent again: refused after its Hello, before a snapshot
            with pytest.raises(Refused) as refused:
                await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD))
            refusals.append(refused.value)
        assert {r.code for r in refusals} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        reason = refusals[0].reason
        assert (
            f"{NS}/haproxy-a opens streams too fast (limit 2/s, burst 3): retry in 0.5 s" in reason
        )
        assert refusals[0].retry_after_s == pytest.approx(0.5)
        assert [r.logged for r in refusals] == [True, False, False]
        # The host's burst (6) is spent too: a flood is refused before its token is reviewed.
        reviewed = reviewer.reviews
        with pytest.raises(Refused) as flood:
            await admission.admit("127.0.0.1", bearer("forged"), first(GOOD))
        assert flood.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "127.0.0.1 opens streams too fast (limit 4/s, burst 6)" in flood.value.reason
        assert reviewer.reviews == reviewed
        # Another host is not held up; after the hinted wait the agent gets in again.
        admission.release(await admission.admit("127.0.0.2", bearer("token-a"), first(GOOD)))
        now[0] += 0.5
        admission.release(await admission.admit("127.0.0.1", bearer("token-a"), first(GOOD)))

    run(body())


def test_agents_behind_one_address_share_a_generous_host_limit() -> None:
    """1,000 agents from one address (the fan-out benchmark's fleet, or a NAT) start at
    once: the default per-host burst takes them, each agent has its own bucket."""
    from controlplane.server.ratelimit import (
        DEFAULT_OPENS_BURST,
        DEFAULT_OPENS_PER_S,
        PeerRateLimit,
    )

    admission = Admission(None, opens=PeerRateLimit(DEFAULT_OPENS_PER_S, DEFAULT_OPENS_BURST))

    async def body() -> None:
        for i in range(1000):
            agent = hello(pod_name=f"haproxy-{i}")
            admission.release(await admission.admit("127.0.0.1", None, first(agent)))

    run(body())
