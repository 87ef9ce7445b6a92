"""The agent stream protocol over real gRPC on loopback (xDS rules)."""

from __future__ import annotations

import logging
from datetime import datetime

import grpc
import pytest

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, W2, Agent, Harness, run, snapshot

PODS = {f"{NS}/haproxy-a": W1, f"{NS}/haproxy-b": W1, f"{NS}/edge-a": W2}


def test_hello_gets_snapshot_and_ack_is_recorded() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            message = await agent.recv_snapshot()
            assert message.snapshot.workload == W1
            assert message.snapshot.version == 1
            pending = await h.agents()
            assert pending[0].pending_version == 1
            assert pending[0].acked_version == 0

            await agent.ack(message)
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.agent == f"{NS}/haproxy-a"
            assert status.workload == W1
            assert status.acked_version == 1
            assert status.acked_content_hash == message.snapshot.content_hash
            assert status.pending_version == 0
            assert status.last_nack_error == ""
            assert status.node_name == "node-a"
            assert status.agent_version == "test"
            assert status.peer_address.startswith("127.0.0.1:")
            assert datetime.fromisoformat(status.connected_since).tzinfo is not None

            workloads = await h.stub.ListWorkloads(pb.ListWorkloadsRequest())
            (summary,) = workloads.workloads
            assert (summary.agents_in_sync, summary.agents_connected) == (1, 1)

    run(body())


def test_nack_keeps_the_acked_version_and_same_content_is_not_resent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            await agent.ack(first)
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]

            h.publish({W1: snapshot(W1, "10.0.0.1", "10.0.0.2")}, PODS)
            second = await agent.recv_snapshot()
            assert second.snapshot.version == 2
            await agent.nack(second, "[ALERT] parsing [haproxy.cfg:12]: unknown keyword 'bogus'")
            await h.until(lambda: h.session("haproxy-a").last_nack_version == 2)  # type: ignore[union-attr]

            (status,) = await h.agents()
            assert status.acked_version == 1
            assert status.acked_content_hash == first.snapshot.content_hash
            assert status.pending_version == 0
            assert status.last_nack_version == 2
            assert "unknown keyword 'bogus'" in status.last_nack_error
            assert any("unknown keyword 'bogus'" in r.getMessage() for r in caplog.records)

            # Republishing the rejected content changes nothing; the next new content is sent.
            assert h.publish({W1: snapshot(W1, "10.0.0.1", "10.0.0.2")}, PODS) == []
            h.publish({W1: snapshot(W1, "10.0.0.3")}, PODS)
            third = await agent.recv_snapshot()
            assert third.snapshot.version == 3
            await agent.ack(third)
            await h.until(lambda: h.session("haproxy-a").acked_version == 3)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.last_nack_error == ""

    with caplog.at_level(logging.WARNING):
        run(body())


def test_stale_ack_is_ignored() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)
            second = await agent.recv_snapshot()
            assert second.nonce != first.nonce

            await agent.ack(first)  # answers a snapshot that is no longer the last one sent
            await h.until(lambda: h.session("haproxy-a").ignored_messages == 1)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.acked_version == 0
            assert status.pending_version == 2

            await agent.ack(second)
            await h.until(lambda: h.session("haproxy-a").acked_version == 2)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.acked_content_hash == second.snapshot.content_hash

    run(body())


def test_ack_after_nack_of_the_same_nonce_records_the_retry_success() -> None:
    """An agent retries a snapshot whose reload failed (port held): its later Ack of the
    same nonce counts, as long as nothing newer was sent; a second Ack does not."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            await agent.nack(first, "reload failed: cannot bind socket (Address already in use)")
            await h.until(lambda: h.session("haproxy-a").last_nack_version == 1)  # type: ignore[union-attr]

            await agent.ack(first)  # the retry applied it
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.acked_content_hash == first.snapshot.content_hash
            assert status.last_nack_error == ""
            await agent.ack(first)  # answered already
            await h.until(lambda: h.session("haproxy-a").ignored_messages == 1)  # type: ignore[union-attr]

            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)
            second = await agent.recv_snapshot()
            await agent.nack(second, "reload failed")
            await h.until(lambda: h.session("haproxy-a").last_nack_version == 2)  # type: ignore[union-attr]
            h.publish({W1: snapshot(W1, "10.0.0.3")}, PODS)
            third = await agent.recv_snapshot()
            await agent.ack(second)  # superseded: the control plane has moved on
            await h.until(lambda: h.session("haproxy-a").ignored_messages == 2)  # type: ignore[union-attr]
            (status,) = await h.agents()
            assert status.acked_version == 1
            assert status.pending_version == third.snapshot.version

    run(body())


def test_reconnect_with_unchanged_content_gets_in_sync_and_no_snapshot() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            first = await agent.recv_snapshot()
            await agent.ack(first)
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]
            agent.close()
            await h.until(lambda: h.session("haproxy-a") is None)

            again = h.agent("haproxy-a")
            await again.hello(first.snapshot.content_hash, applied_version=7)
            answer = await again.recv()
            assert answer.WhichOneof("message") == "in_sync"
            assert answer.in_sync.content_hash == first.snapshot.content_hash
            assert answer.in_sync.version == 1
            assert answer.nonce == ""
            (status,) = await h.agents()
            assert status.acked_content_hash == first.snapshot.content_hash

            # The next message on this stream is the next version: nothing else was queued.
            h.publish({W1: snapshot(W1, "10.0.0.9")}, PODS)
            following = await again.recv_snapshot()
            assert following.snapshot.version == 2

    run(body())


def test_waiting_agent_that_runs_the_published_content_gets_in_sync() -> None:
    """Found by the control-plane SIGKILL fault test: an agent that reconnects before the
    restarted control plane has computed anything is told to wait; once the same content is
    published it must hear InSync (and be counted at that version), not silence."""
    content = snapshot(W1, "127.0.2.1")

    async def body() -> None:
        async with Harness() as h:
            agent = h.agent("haproxy-a")
            await agent.hello(applied_hash=content.content_hash, applied_version=7)
            assert (await agent.recv()).WhichOneof("message") == "waiting"
            h.publish({W1: content}, {f"{NS}/haproxy-a": W1})
            answer = await agent.recv()
            assert answer.WhichOneof("message") == "in_sync"
            assert answer.in_sync.content_hash == content.content_hash
            session = h.session("haproxy-a")
            assert session is not None and session.acked_version == answer.in_sync.version

    run(body())


def test_agents_of_one_workload_get_byte_identical_snapshots() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            a, b = h.agent("haproxy-a"), h.agent("haproxy-b")
            await a.hello()
            await b.hello()
            raw_a, raw_b = await a.recv_raw(), await b.recv_raw()
            nonce_a = pb.ServerMessage.FromString(raw_a).nonce
            nonce_b = pb.ServerMessage.FromString(raw_b).nonce
            body_a = raw_a[len(pb.ServerMessage(nonce=nonce_a).SerializeToString()) :]
            body_b = raw_b[len(pb.ServerMessage(nonce=nonce_b).SerializeToString()) :]
            published = h.store.get(W1)
            assert published is not None
            assert body_a == body_b == published.message_bytes

    run(body())


def test_an_agent_never_sees_another_workloads_snapshot() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")}, PODS)
            mine, other = h.agent("haproxy-a"), h.agent("edge-a")
            await mine.hello()
            await other.hello()
            assert (await mine.recv_snapshot()).snapshot.workload == W1
            assert (await other.recv_snapshot()).snapshot.workload == W2

            h.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.2")}, PODS)
            assert (await other.recv_snapshot()).snapshot.version == 2
            h.publish({W1: snapshot(W1, "10.0.0.2"), W2: snapshot(W2, "10.0.9.2")}, PODS)
            # W2's new version was not sent to `mine`: its next message is W1's.
            following = await mine.recv_snapshot()
            assert (following.snapshot.workload, following.snapshot.version) == (W1, 2)
            assert [s.agent for s in await h.agents(W2)] == [f"{NS}/edge-a"]

    run(body())


def test_unknown_pod_waits_then_gets_the_snapshot_once_known() -> None:
    async def body() -> None:
        async with Harness() as h:
            agent = h.agent("haproxy-new")
            await agent.hello()
            before = await agent.recv()
            assert before.WhichOneof("message") == "waiting"
            assert "no snapshot computed yet" in before.waiting.reason

            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            unknown = await agent.recv()
            assert unknown.WhichOneof("message") == "waiting"
            assert f"{NS}/haproxy-new" in unknown.waiting.reason
            (status,) = await h.agents()
            assert status.workload == ""

            h.publish({W1: snapshot(W1, "10.0.0.1")}, {**PODS, f"{NS}/haproxy-new": W1})
            served = await agent.recv_snapshot()
            assert served.snapshot.workload == W1

    run(body())


def test_a_vanished_workload_turns_its_streams_to_waiting() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            await agent.recv_snapshot()
            h.publish({}, {})
            gone = await agent.recv()
            assert gone.WhichOneof("message") == "waiting"

    run(body())


def test_first_message_must_be_a_hello() -> None:
    async def body() -> None:
        async with Harness() as h:
            agent = h.agent("haproxy-a")
            await agent.call.write(pb.AgentMessage(ack=pb.Ack(nonce="1")))
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await agent.recv()
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "Hello" in (raised.value.details() or "")

    run(body())


def test_server_stop_ends_streams_cleanly() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            agent = h.agent("haproxy-a")
            await agent.hello()
            await agent.recv_snapshot()
            await h.server.stop(1.0)
            ending = await agent.call.read()
            assert ending is grpc.aio.EOF
            assert await agent.call.code() == grpc.StatusCode.OK

    run(body())


def test_an_agent_that_does_not_read_holds_up_nobody() -> None:
    async def body() -> None:
        async with Harness() as h:
            big = [f"10.{i // 250}.{i % 250}.1" for i in range(8_000)]  # ~250 kB: > the window

            def version(n: int) -> dict[str, pb.Snapshot]:
                return {W1: snapshot(W1, f"10.255.0.{n}", *big)}

            h.publish(version(1), PODS)
            # A small receive window without auto-tuning: the server's writes to it block.
            narrow = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]
            slow_channel = grpc.aio.insecure_channel(h.address, options=narrow)
            slow, fast = Agent(slow_channel, "haproxy-a"), h.agent("haproxy-b")
            await slow.hello()  # and never reads until the end
            await fast.hello()
            for n in range(1, 11):
                if n > 1:
                    h.publish(version(n), PODS)
                received = await fast.recv_snapshot()
                assert received.snapshot.version == n
                await fast.ack(received)

            seen = []
            while not seen or seen[-1] != 10:
                seen.append((await slow.recv_snapshot()).snapshot.version)
            # Only the latest pending version is kept per stream: intermediate ones are skipped.
            assert len(seen) <= 3, seen  # in practice [1, 10]
            slow.close()
            await slow_channel.close()

    run(body())


def test_a_snapshot_above_the_send_limit_is_said_once_per_agent_and_not_claimed_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`--max-send-message-bytes` below the snapshot size: agents looped on
    RESOURCE_EXHAUSTED while the control plane logged "snapshot sent" at INFO. The stream
    now ends with RESOURCE_EXHAUSTED naming both sizes, a warning says it once per agent
    (not on every reconnect), nothing claims it was sent, and a metric counts it."""
    from controlplane.server import ControlPlaneServer, ServerOptions

    limit = 2048

    async def body() -> None:
        options = ServerOptions(max_send_message_bytes=limit)
        async with Harness(lambda store: ControlPlaneServer(store, options)) as h:
            addresses = [f"10.0.{i // 250}.{i % 250}" for i in range(300)]
            h.publish({W1: snapshot(W1, *addresses)}, PODS)
            size = len(h.store.get(W1).message_bytes)  # type: ignore[union-attr]
            assert size > limit
            for _ in range(3):  # the agent reconnecting into the same refusal
                agent = h.agent("haproxy-a")
                await agent.hello()
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    await agent.call.read()
                assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                details = ended.value.details() or ""
                assert f"--max-send-message-bytes {limit}" in details
                assert " bytes" in details
            counted = h.server.metrics.registry.get_sample_value(
                "peerplane_messages_too_large_total", {"workload": W1}
            )
            assert counted == 3

    with caplog.at_level(logging.INFO, logger="controlplane.server.stream"):
        run(body())
    warnings = [r.getMessage() for r in caplog.records if "not sent to" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"--max-send-message-bytes {limit}" in warnings[0]
    assert f"{NS}/haproxy-a" in warnings[0]
    assert not [r for r in caplog.records if "snapshot sent to" in r.getMessage()]
