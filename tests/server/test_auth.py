"""Agent authentication, inspection authentication and the per-peer stream cap, on the
in-process server (the TokenReview itself is tested against the fake API server in
kube/test_tokenreview.py)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import grpc
import pytest

from controlplane.cli.flags import (
    add_serve_arguments,
    auth_warning,
    check,
    inspection_authenticated,
)
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer, ServerOptions, StreamLimits
from controlplane.server.auth import Authenticator, Denied, Identity, bearer_token
from controlplane.server.peers import PeerStreams, peer_host
from peerplane.parts import CONTRACT
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, W2, Harness, bearer, run, snapshot

PODS = {f"{NS}/haproxy-a": W1, f"{NS}/haproxy-b": W1, "edge/edge-a": W2}


class FakeReviewer:
    """token -> identity; counts reviews."""

    def __init__(self) -> None:
        self.tokens: dict[str, Identity] = {
            "token-a": Identity(f"system:serviceaccount:{NS}:haproxy", NS, "haproxy", "haproxy-a"),
            "token-edge": Identity(
                "system:serviceaccount:edge:haproxy", "edge", "haproxy", "edge-a"
            ),
            "token-ops": Identity("alice"),
        }
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def review(self, token: str, audiences: Sequence[str]) -> Identity:
        self.calls.append((token, tuple(audiences)))
        if token not in self.tokens:
            raise Denied(grpc.StatusCode.PERMISSION_DENIED, "invalid token: unknown")
        return self.tokens[token]


def authenticated(
    reviewer: FakeReviewer,
    inspection: bool | None = None,
    per_peer: int = 0,
    agents: bool = True,
) -> Harness:
    def build(store: SnapshotStore) -> ControlPlaneServer:
        options = ServerOptions(stream=StreamLimits(max_streams_per_peer=per_peer))
        return ControlPlaneServer(
            store,
            options,
            authenticator=Authenticator(reviewer, "peerplane"),
            authenticate_agents=agents,
            authenticate_inspection=inspection,
        )

    return Harness(build)


def publish(h: Harness) -> None:
    h.publish({W1: snapshot(W1, "127.0.2.1"), W2: snapshot(W2, "127.0.3.1")}, PODS)


async def refused(h: Harness, pod: str, token: str, namespace: str = NS) -> grpc.StatusCode:
    agent = h.agent(pod, namespace, token)
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        # The token is checked before the Hello is read, so a refusal may end the call
        # before the Hello is written: the write fails then (was a flaky test, 3 in 20).
        await agent.hello()
        await agent.recv()
    code: grpc.StatusCode = failure.value.code()
    return code


def test_an_agent_with_its_own_pod_token_gets_its_workload_only() -> None:
    reviewer = FakeReviewer()

    async def body() -> None:
        async with authenticated(reviewer) as h:
            publish(h)
            agent = h.agent("haproxy-a", token="token-a")
            await agent.hello()
            message = await agent.recv_snapshot()
            assert message.snapshot.workload == W1
            await agent.ack(message)
            # A second stream with the same token: served from the cache, no new review.
            again = h.agent("haproxy-a", token="token-a")
            await again.hello()
            assert (await again.recv_snapshot()).snapshot.workload == W1
            assert reviewer.calls == [("token-a", ("peerplane",))]
            session = h.session("haproxy-a")
            assert session is not None and session.identity.startswith("system:serviceaccount:")

    run(body())


def test_missing_invalid_and_foreign_tokens_are_refused() -> None:
    reviewer = FakeReviewer()

    async def body() -> None:
        async with authenticated(reviewer) as h:
            publish(h)
            assert await refused(h, "haproxy-a", "") == grpc.StatusCode.UNAUTHENTICATED
            assert await refused(h, "haproxy-a", "forged") == grpc.StatusCode.PERMISSION_DENIED
            # haproxy-a's token naming haproxy-b (same workload) or edge-a (another one).
            assert await refused(h, "haproxy-b", "token-a") == grpc.StatusCode.PERMISSION_DENIED
            code = await refused(h, "edge-a", "token-a", namespace="edge")
            assert code == grpc.StatusCode.PERMISSION_DENIED
            # A valid token that is not bound to a pod (a user's) cannot be an agent.
            assert await refused(h, "haproxy-a", "token-ops") == grpc.StatusCode.PERMISSION_DENIED
            assert h.server.registry.sessions() == []
            refusals = h.server.metrics.refused_streams
            assert refusals.labels(code="PERMISSION_DENIED")._value.get() == 4

    run(body())


def test_an_agent_cannot_switch_pods_after_hello() -> None:
    async def body() -> None:
        async with authenticated(FakeReviewer()) as h:
            publish(h)
            agent = h.agent("haproxy-a", token="token-a")
            await agent.hello()
            await agent.recv_snapshot()
            other = pb.Hello(contract=CONTRACT, pod_namespace="edge", pod_name="edge-a")
            await agent.call.write(pb.AgentMessage(hello=other))
            await h.until(
                lambda: (s := h.session("haproxy-a")) is not None and s.ignored_messages == 1
            )
            session = h.session("haproxy-a")
            assert session is not None and session.workload == W1
            h.publish({W1: snapshot(W1, "127.0.2.9"), W2: snapshot(W2, "127.0.3.9")}, PODS)
            assert (await agent.recv_snapshot()).snapshot.workload == W1

    run(body())


def test_inspection_needs_a_non_agent_token_when_enabled() -> None:
    async def body() -> None:
        async with authenticated(FakeReviewer(), inspection=True) as h:
            publish(h)
            request = pb.GetSnapshotRequest(workload=W2)
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await h.stub.GetSnapshot(request)
            assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await h.stub.GetSnapshot(request, metadata=bearer("token-a"))
            assert failure.value.code() == grpc.StatusCode.PERMISSION_DENIED
            for call in (h.stub.ListWorkloads, h.stub.ListAgents):
                with pytest.raises(grpc.aio.AioRpcError) as failure:
                    await call(
                        pb.ListWorkloadsRequest()
                        if call is h.stub.ListWorkloads
                        else pb.ListAgentsRequest()
                    )
                assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            answer = await h.stub.GetSnapshot(request, metadata=bearer("token-ops"))
            assert answer.workload == W2
            listed = await h.stub.ListWorkloads(
                pb.ListWorkloadsRequest(), metadata=bearer("token-ops")
            )
            assert [w.workload for w in listed.workloads] == sorted([W1, W2])

    run(body())


def test_inspection_follows_agent_authentication_unless_opened() -> None:
    """Regression: authenticated agents left every snapshot open."""

    async def body() -> None:
        async with authenticated(FakeReviewer()) as h:
            publish(h)
            for call, request in (
                (h.stub.GetSnapshot, pb.GetSnapshotRequest(workload=W1)),
                (h.stub.ListAgents, pb.ListAgentsRequest()),
                (h.stub.ListWorkloads, pb.ListWorkloadsRequest()),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as failure:
                    await call(request)  # type: ignore[operator]
                assert failure.value.code() == grpc.StatusCode.UNAUTHENTICATED
            answer = await h.stub.GetSnapshot(
                pb.GetSnapshotRequest(workload=W1), metadata=bearer("token-ops")
            )
            assert answer.workload == W1
        async with authenticated(FakeReviewer(), inspection=False) as h:  # opened explicitly
            publish(h)
            assert (await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1))).workload == W1

    run(body())


def serve_args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(["--source", "files:/x", "--insecure", *flags])


def test_serve_flags_make_inspection_follow_agent_authentication() -> None:
    agents_only = serve_args("--authenticate-agents")
    assert check(agents_only) is None
    assert inspection_authenticated(agents_only) and auth_warning(agents_only) is None
    opened = serve_args("--authenticate-agents", "--open-inspection")
    assert check(opened) is None and not inspection_authenticated(opened)
    assert "answer any caller without a token" in (auth_warning(opened) or "")
    assert not inspection_authenticated(serve_args())
    assert inspection_authenticated(serve_args("--authenticate-inspection"))
    both = serve_args("--authenticate-agents", "--authenticate-inspection", "--open-inspection")
    assert "contradicts" in (check(both) or "")
    assert "only applies with --authenticate-agents" in (
        check(serve_args("--open-inspection")) or ""
    )


def test_streams_beyond_the_per_peer_cap_are_refused() -> None:
    async def body() -> None:
        async with authenticated(FakeReviewer(), per_peer=2, agents=False) as h:
            publish(h)
            first, second = h.agent("haproxy-a"), h.agent("haproxy-b")
            for agent in (first, second):
                await agent.hello()
                await agent.recv_snapshot()
            third = h.agent("haproxy-a")
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await third.hello()  # the cap is checked first: this write may fail already
                await third.recv()
            assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            first.close()
            await h.until(lambda: len(h.server.registry.sessions()) == 1)
            fourth = h.agent("haproxy-a")
            await fourth.hello()
            await fourth.recv_snapshot()

    run(body())


def test_bearer_token_parsing_and_the_bounded_cache() -> None:
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("Authorization", b"bearer  abc ")]) == "abc"
    for bad in ([], [("authorization", "Basic abc")], [("authorization", "Bearer ")]):
        with pytest.raises(Denied) as denied:
            bearer_token(bad)
        assert denied.value.code == grpc.StatusCode.UNAUTHENTICATED

    reviewer = FakeReviewer()
    now = [0.0]
    auth = Authenticator(reviewer, ttl_s=60, max_entries=2, clock=lambda: now[0])

    async def body() -> None:
        for token in ("token-a", "token-edge", "token-ops", "token-a"):
            await auth.authenticate(bearer(token))
        assert auth.cached() == 2  # bounded: token-a was evicted, then reviewed again
        assert [t for t, _ in reviewer.calls] == ["token-a", "token-edge", "token-ops", "token-a"]
        await auth.authenticate(bearer("token-a"))
        assert len(reviewer.calls) == 4
        now[0] = 61.0  # expired: reviewed again
        await auth.authenticate(bearer("token-a"))
        assert len(reviewer.calls) == 5
        with pytest.raises(Denied):
            await auth.authenticate(bearer("forged"))
        with pytest.raises(Denied):
            await auth.authenticate(bearer("forged"))
        assert len(reviewer.calls) == 7  # negative answers are not cached

    run(body())


def test_peer_hosts_and_the_counter() -> None:
    assert peer_host("ipv4:127.0.0.1:5000") == "127.0.0.1"
    assert peer_host("ipv6:[::1]:5000") == "::1"
    streams = PeerStreams(limit=1)
    assert streams.acquire("a") and not streams.acquire("a") and streams.acquire("b")
    streams.release("a")
    assert streams.acquire("a")
    assert PeerStreams(0).acquire("x")
