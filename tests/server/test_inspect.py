"""Inspection RPCs and health through real stubs."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controlplane.publish.content import SnapshotContent
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, W2, WAIT_S, Harness, run, snapshot

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def test_get_snapshot_of_an_unknown_workload_is_not_found_with_the_known_ones() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")})
            found = await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload=W1))
            assert (found.workload, found.version) == (W1, 1)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await h.stub.GetSnapshot(pb.GetSnapshotRequest(workload="nope/Deployment/x"))
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
            details = raised.value.details() or ""
            assert "nope/Deployment/x" in details and W1 in details
            with pytest.raises(grpc.aio.AioRpcError) as empty:
                await h.stub.GetSnapshot(pb.GetSnapshotRequest())
            assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(body())


def test_list_workloads_summarises_each_workload() -> None:
    async def body() -> None:
        async with Harness() as h:
            message = snapshot(W1, "10.0.0.1", peers=("haproxy-a", "haproxy-b")).message()
            message.warnings.add(object="ConfigMap x/y", key="k", value="v", reason="bad")
            message.backends[0].warnings.add(object="Service default/shop", key="k", value="v")
            w1 = SnapshotContent.from_message(message)
            h.publish({W1: w1, W2: snapshot(W2, "10.0.9.1")}, {f"{NS}/haproxy-a": W1})
            agent = h.agent("haproxy-a")
            await agent.hello()
            await agent.recv_snapshot()
            response = await h.stub.ListWorkloads(pb.ListWorkloadsRequest())
            by_name = {w.workload: w for w in response.workloads}
            assert list(by_name) == sorted([W1, W2])
            first = by_name[W1]
            assert (first.version, first.peers, first.backends, first.warnings) == (1, 2, 1, 2)
            assert (first.agents_in_sync, first.agents_connected) == (0, 1)
            assert (by_name[W2].agents_in_sync, by_name[W2].agents_connected) == (0, 0)

    run(body())


def test_list_agents_filters_by_workload() -> None:
    async def body() -> None:
        async with Harness() as h:
            pods = {f"{NS}/haproxy-a": W1, f"{NS}/edge-a": W2}
            h.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")}, pods)
            for pod in ("haproxy-a", "edge-a"):
                agent = h.agent(pod)
                await agent.hello()
                await agent.recv_snapshot()
            assert [a.agent for a in await h.agents()] == [f"{NS}/edge-a", f"{NS}/haproxy-a"]
            assert [a.agent for a in await h.agents(W1)] == [f"{NS}/haproxy-a"]
            assert await h.agents("none/Deployment/none") == []

    run(body())


def test_health_serves_after_the_first_publish_and_can_be_withdrawn() -> None:
    async def body() -> None:
        async with Harness() as h:
            health = health_pb2_grpc.HealthStub(h.channel)

            async def status(service: str = "") -> int:
                request = health_pb2.HealthCheckRequest(service=service)
                return int((await health.Check(request)).status)

            assert await status() == NOT_SERVING
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            assert (await asyncio.wait_for(watch.read(), WAIT_S)).status == NOT_SERVING
            h.publish({})
            assert (await asyncio.wait_for(watch.read(), WAIT_S)).status == SERVING
            watch.cancel()
            assert await status() == SERVING
            assert await status("peerplane.v1.PeerPlane") == SERVING
            await h.server.set_serving(False)
            assert await status() == NOT_SERVING
            await h.server.set_serving(True)
            assert await status() == SERVING
            # From another thread, as a leader elector's callback would.
            done = await asyncio.to_thread(lambda: h.server.set_serving_threadsafe(False))
            await asyncio.wrap_future(done)
            assert await status() == NOT_SERVING

    run(body())
