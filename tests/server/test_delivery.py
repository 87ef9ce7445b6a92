"""`server.delivery`: the route status writer's wait for the agents to hold the current
publication, over real gRPC on loopback."""

from __future__ import annotations

import asyncio
import time

from controlplane.server.delivery import DeliveryWait, fleet_holds_current
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, W2, Agent, Harness, run, snapshot

PODS = {f"{NS}/haproxy-a": W1, f"{NS}/haproxy-b": W1, f"{NS}/edge-a": W2}


async def two_agents_sent_version_1(h: Harness) -> list[tuple[Agent, pb.ServerMessage]]:
    """W1 published; haproxy-a and haproxy-b connected, each with its first snapshot
    (version 1) received and not answered yet."""
    h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
    sent = []
    for pod in ("haproxy-a", "haproxy-b"):
        agent = h.agent(pod)
        await agent.hello()
        sent.append((agent, await agent.recv_snapshot()))
    return sent


def test_the_wait_ends_when_every_agent_acknowledged_the_current_version() -> None:
    """From the writer's thread: False after its timeout while an agent still applies;
    True as soon as the last one acknowledged, long before the timeout."""

    async def body() -> None:
        async with Harness() as h:
            loop = asyncio.get_running_loop()
            wait = DeliveryWait(h.server.registry, h.store, loop)
            (a, first_a), (b, first_b) = await two_agents_sent_version_1(h)
            assert not await loop.run_in_executor(None, wait, 0.2)
            await a.ack(first_a)
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]
            assert not fleet_holds_current(h.server.registry, h.store)
            started = time.monotonic()
            waiting = loop.run_in_executor(None, wait, 30.0)
            await asyncio.sleep(0.1)
            assert not waiting.done()
            await b.ack(first_b)
            assert await waiting
            assert time.monotonic() - started < 10
            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)  # a new version: not held yet
            assert not fleet_holds_current(h.server.registry, h.store)

    run(body())


def test_no_agent_or_an_agent_of_no_workload_is_not_waited_for() -> None:
    async def body() -> None:
        async with Harness() as h:
            loop = asyncio.get_running_loop()
            wait = DeliveryWait(h.server.registry, h.store, loop)
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            assert await loop.run_in_executor(None, wait, 5.0)
            stray = h.agent("stray")  # no workload has it
            await stray.hello()
            await h.until(lambda: h.session("stray") is not None)
            assert await loop.run_in_executor(None, wait, 5.0)

    run(body())


def test_an_agent_that_refused_the_current_version_is_not_waited_for() -> None:
    """A Nacking agent (a HAProxy that refuses the config) would otherwise hold back every
    round's status writes by the whole timeout; once a newer version goes out it is waited
    for again."""

    async def body() -> None:
        async with Harness() as h:
            loop = asyncio.get_running_loop()
            wait = DeliveryWait(h.server.registry, h.store, loop)
            (a, first_a), (b, first_b) = await two_agents_sent_version_1(h)
            await a.ack(first_a)
            await b.nack(first_b, "haproxy refused the config")
            await h.until(lambda: h.session("haproxy-b").last_nack_version == 1)  # type: ignore[union-attr]
            await h.until(lambda: h.session("haproxy-a").acked_version == 1)  # type: ignore[union-attr]
            started = time.monotonic()
            assert await loop.run_in_executor(None, wait, 30.0)
            assert time.monotonic() - started < 10
            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)  # sent to both: waited for again
            assert not fleet_holds_current(h.server.registry, h.store)

    run(body())
