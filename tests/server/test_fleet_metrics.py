"""The fleet's sync state as metrics (`controlplane.server.fleetmetrics`): the state of
each agent (table), and `peerplane_agents` / `peerplane_agents_pending_seconds` scraped
over HTTP from a real server whose agents ACK, NACK, stay silent or are unknown.
docs/operations.md, "Dashboards and alerts"."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

from controlplane.metrics import MetricsServer
from controlplane.server import reports
from controlplane.server.fleetmetrics import (
    STATES,
    FleetCollector,
    FleetCounts,
    classify,
    count,
)
from controlplane.server.protocol import Sent, StreamState
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.server_harness import NS, W1, W2, Harness, run, snapshot

GOOD, BAD = "a" * 64, "b" * 64


@dataclass(frozen=True)
class Current:
    """A published version as `classify` reads it."""

    workload: str = W1
    version: int = 2
    content_hash: str = GOOD
    published_at: float = 0.0
    message_bytes: bytes = b""
    bases: frozenset[str] = frozenset()


SENT = Sent("3", 2, GOOD, since=10.0)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("state", "current", "expected"),
    [
        (StreamState(workload=W1, acked_hash=GOOD), Current(), "synced"),
        (StreamState(workload=W1, acked_hash=BAD, pending=SENT), Current(), "pending"),
        # A newer version in flight after a NACK: pending, not nacked.
        (StreamState(workload=W1, pending=SENT, nacked=SENT), Current(), "pending"),
        (StreamState(workload=W1, acked_hash=BAD, nacked=SENT), Current(), "nacked"),
        # After a NACK the content went back to what the agent runs: synced again.
        (StreamState(workload=W1, acked_hash=GOOD, nacked=SENT), Current(), "synced"),
        (StreamState(workload=W1, acked_hash=BAD), Current(), "waiting"),  # not sent yet
        (StreamState(), None, "waiting"),  # no workload
        (StreamState(workload=W1, acked_hash=GOOD), None, "waiting"),  # none published
    ],
)
def test_an_agents_state(state: StreamState, current: Current | None, expected: str) -> None:
    assert classify(state, current) == expected


@pytest.mark.unit
def test_counts_have_every_state_of_every_workload_and_the_oldest_pending_age() -> None:
    states = [
        StreamState(workload=W1, acked_hash=GOOD),
        StreamState(workload=W1, pending=Sent("1", 2, GOOD, since=95.0)),
        StreamState(workload=W1, pending=Sent("4", 2, GOOD, since=70.0)),
        StreamState(),
    ]
    published = {W1: Current(), W2: Current(workload=W2)}
    counts = count(states, published, published.get, now=100.0)
    assert counts.agents == {
        **{(W1, s): n for s, n in zip(STATES, (1, 2, 0, 0), strict=True)},
        **{(W2, s): 0 for s in STATES},
        ("none", "waiting"): 1,
    }
    assert counts.pending_seconds == {W1: 30.0, W2: 0.0}


def synced_value(collector: FleetCollector) -> float:
    (agents, *_) = collector.collect()
    (sample,) = agents.samples
    return float(sample.value)


@pytest.mark.unit
def test_a_busy_or_closed_loop_gets_the_last_counts_not_a_hung_scrape() -> None:
    """The scrape waits for the event loop at most its timeout: a loop busy with a long
    computation, or closed, answers with the counts of the last scrape."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    counted: list[int] = []

    def counter() -> FleetCounts:
        counted.append(1)
        return FleetCounts({(W1, "synced"): len(counted)}, {W1: 0.0})

    collector = FleetCollector(counter, loop, timeout_s=0.2)
    release = threading.Event()
    try:
        assert synced_value(collector) == 1
        loop.call_soon_threadsafe(release.wait, 10)  # the loop is busy
        started = time.monotonic()
        assert synced_value(collector) == 1  # the last counts, after the timeout
        assert time.monotonic() - started < 5
        release.set()
        assert synced_value(collector) == 2  # counted again once the loop is free
        assert len(counted) == 2, "the timed-out count never ran late"
    finally:
        release.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert synced_value(collector) == 2  # closed: the last counts


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def agents(workload: str, state: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("peerplane_agents", (("state", state), ("workload", workload)))


def test_agents_by_state_scraped_from_a_real_server() -> None:
    """Four real streams: one ACKs, one NACKs, one never answers, one is not a known pod;
    a second workload has no agent (synced 0: the "no agent in sync" alert's series).
    Scraped from the metrics server's thread, counted on the server's event loop."""

    async def body() -> None:
        async with Harness() as h:
            pods = {f"{NS}/{pod}": W1 for pod in ("good", "bad", "silent")}
            h.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.0.2")}, pods)
            metrics = MetricsServer(h.server.metrics, "127.0.0.1", 0, lambda: True)
            metrics.start()
            try:
                good, bad, silent, stranger = (
                    h.agent(p) for p in ("good", "bad", "silent", "stranger")
                )
                for agent in (good, bad, silent, stranger):
                    await agent.hello()
                await good.ack(await good.recv_snapshot())
                await bad.nack(await bad.recv_snapshot(), "haproxy -c: [ALERT] parse error")
                await silent.recv_snapshot()
                assert (await stranger.recv()).WhichOneof("message") == "waiting"
                await h.until(lambda: (s := h.session("bad")) is not None and s.pending is None)
                await h.until(lambda: (s := h.session("good")) is not None and s.pending is None)
                await asyncio.sleep(0.2)  # the silent agent's version ages
                found = await asyncio.to_thread(scrape, metrics.port)
            finally:
                metrics.stop()
            assert found[agents(W1, "synced")] == 1
            assert found[agents(W1, "nacked")] == 1
            assert found[agents(W1, "pending")] == 1
            assert found[agents(W1, "waiting")] == 0
            assert found[agents("none", "waiting")] == 1
            assert all(found[agents(W2, state)] == 0 for state in STATES)
            age = found[("peerplane_agents_pending_seconds", (("workload", W1),))]
            assert 0.2 <= age < 30
            assert found[("peerplane_agents_pending_seconds", (("workload", W2),))] == 0

        # Stopped: the collector is gone from the registry (no loop to ask).
        names = {m.name for m in h.server.metrics.registry.collect()}
        assert "peerplane_agents" not in names and "peerplane_connected_agents" in names

    run(body())


def test_parts_set_aside_are_listed_bounded_and_scraped() -> None:
    """An Ack naming the parts its agent runs without (a tenant's refused certificate):
    ListAgents names them (bounded, escaped), `peerplane_agent_parts_set_aside` counts
    the most any agent of the workload has; the next Ack without any clears both."""

    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, {f"{NS}/haproxy-a": W1})
            metrics = MetricsServer(h.server.metrics, "127.0.0.1", 0, lambda: True)
            metrics.start()
            series = ("peerplane_agent_parts_set_aside", (("workload", W1),))
            try:
                agent = h.agent("haproxy-a")
                await agent.hello()
                first = await agent.recv_snapshot()
                parts = [
                    pb.SetAsidePart(
                        kind="certificate",
                        name=f"tenant-b_web-tls-{i}",
                        fingerprint="ab" * 32,
                        reason="haproxy -c: ee key too small\x1b[31m" + "x" * 1000,
                    )
                    for i in range(reports.MAX_SET_ASIDE + 44)
                ]
                ack = pb.Ack(
                    nonce=first.nonce,
                    version=1,
                    content_hash=first.snapshot.content_hash,
                    applied_by="reload",
                    set_aside=parts,
                    set_aside_count=1000,
                )
                await agent.call.write(pb.AgentMessage(ack=ack))
                await h.until(lambda: (s := h.session("haproxy-a")) is not None and s.set_aside)
                (status,) = await h.agents()
                assert status.set_aside_count == 1000
                assert len(status.set_aside) == reports.MAX_SET_ASIDE
                kept = status.set_aside[0]
                assert (kept.kind, kept.name) == ("certificate", "tenant-b_web-tls-0")
                assert kept.reason.startswith("haproxy -c: ee key too small")
                assert "\x1b" not in kept.reason and kept.reason.endswith("more chars]")
                assert len(kept.reason) < 6 * reports.MAX_REASON_CHARS
                found = await asyncio.to_thread(scrape, metrics.port)
                assert found[series] == 1000
                h.publish({W1: snapshot(W1, "10.0.0.2")}, {f"{NS}/haproxy-a": W1})
                await agent.ack(await agent.recv_snapshot())
                await h.until(
                    lambda: (s := h.session("haproxy-a")) is not None and s.acked_version == 2
                )
                (mended,) = await h.agents()
                assert list(mended.set_aside) == [] and mended.set_aside_count == 0
                assert (await asyncio.to_thread(scrape, metrics.port))[series] == 0
            finally:
                metrics.stop()

    run(body())
