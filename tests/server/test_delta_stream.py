"""Deltas over real gRPC on loopback (docs/design.md, "The agent stream").

The agent here is `tests/helpers/delta_agent.py`: it materializes each delta into a full
snapshot itself and checks the result's SHA-256 against `to_content_hash`, so every
delta that is acked was proven to rebuild the published snapshot exactly.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import pytest

from controlplane.cli.flags import add_serve_arguments
from controlplane.cli.wiring import server_options, snapshot_store
from controlplane.publish.store import SnapshotStore
from controlplane.server import ControlPlaneServer, ServerOptions, StreamLimits
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.delta_agent import DeltaAgent
from tests.helpers.server_harness import NS, W1, W2, Harness, run, snapshot

PODS = {f"{NS}/haproxy-a": W1, f"{NS}/haproxy-b": W1}


def agent(h: Harness, pod: str, *, accepts_deltas: bool = True) -> DeltaAgent:
    return DeltaAgent(h.channel, pod, accepts_deltas=accepts_deltas)


def sample(h: Harness, name: str, **labels: str) -> float:
    return h.server.metrics.registry.get_sample_value(name, labels) or 0.0


async def receive_and_ack(a: DeltaAgent) -> pb.ServerMessage:
    message, problem = await a.step()
    assert not problem, problem
    await a.answer(message, problem)
    return message


async def acked(h: Harness, pod: str, version: int) -> None:
    await h.until(lambda: getattr(h.session(pod), "acked_version", 0) == version)


async def both_on_the_first_version(h: Harness) -> tuple[DeltaAgent, DeltaAgent]:
    """Agents haproxy-a and haproxy-b connected, each sent the full snapshot of version 1
    (checked) and ACKing it."""
    h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
    a, b = agent(h, "haproxy-a"), agent(h, "haproxy-b")
    for each in (a, b):
        await each.hello()
        first = await receive_and_ack(each)
        assert first.WhichOneof("message") == "snapshot"
    await acked(h, "haproxy-a", 1)
    await acked(h, "haproxy-b", 1)
    return a, b


def test_full_snapshot_first_then_deltas_shared_by_every_stream() -> None:
    async def body() -> None:
        async with Harness() as h:
            a, b = await both_on_the_first_version(h)
            assert [s.deltas for s in await h.agents()] == [True, True]

            h.publish({W1: snapshot(W1, "10.0.0.1", "10.0.0.2")}, PODS)
            raw_a, raw_b = await a.recv_raw(), await b.recv_raw()
            assert raw_a == raw_b  # same nonce on both streams, same shared delta bytes
            (delta, problem), _ = a.take(raw_a), b.take(raw_b)
            assert delta.WhichOneof("message") == "delta" and not problem
            assert delta.delta.from_content_hash == snapshot(W1, "10.0.0.1").content_hash

            # Materialized by the agent, the delta gives the published snapshot.
            h.publish(
                {W1: snapshot(W1, "10.0.0.2", peers=("haproxy-a", "haproxy-b"))}, PODS
            )  # the second delta supersedes the unacked first one: base is what was sent
            third = await a.recv_raw()
            assert await b.recv_raw() == third
            message, problem = a.take(third)
            await a.answer(message, problem)
            assert message.WhichOneof("message") == "delta" and not problem
            assert message.delta.peers_changed
            published = h.store.get(W1)
            assert published is not None and a.held == published.snapshot()
            await acked(h, "haproxy-a", 3)

            assert sample(h, "peerplane_snapshots_sent_total", workload=W1) == 2
            assert sample(h, "peerplane_deltas_sent_total", workload=W1) == 4
            delta_bytes = sample(h, "peerplane_sent_bytes_total", kind="delta")
            snapshot_bytes = sample(h, "peerplane_sent_bytes_total", kind="snapshot")
            assert delta_bytes == 2 * (len(raw_a) + len(third))
            assert snapshot_bytes > 0
            assert sample(h, "peerplane_retained_versions") == 3

    run(body())


def test_an_unknown_base_gets_the_full_snapshot() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            a = agent(h, "haproxy-a")
            await a.hello("f" * 64, 9)  # another control plane's content, say
            message = await receive_and_ack(a)
            assert message.WhichOneof("message") == "snapshot"
            await acked(h, "haproxy-a", 1)

    run(body())


def test_a_resync_nack_gets_the_full_snapshot_again_and_is_counted() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            a = agent(h, "haproxy-a")
            await a.hello()
            await receive_and_ack(a)
            await acked(h, "haproxy-a", 1)

            a.held = None  # the agent lost its copy: it cannot build the next delta
            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)
            delta, problem = await a.step()
            assert delta.WhichOneof("message") == "delta" and problem
            await a.answer(delta, problem)

            again = await receive_and_ack(a)
            assert again.WhichOneof("message") == "snapshot"
            assert again.snapshot.content_hash == delta.delta.to_content_hash
            assert int(again.nonce) == int(delta.nonce) + 1
            await acked(h, "haproxy-a", 2)
            assert sample(h, "peerplane_delta_resyncs_total", workload=W1) == 1

            h.publish({W1: snapshot(W1, "10.0.0.3")}, PODS)
            after = await receive_and_ack(a)
            assert after.WhichOneof("message") == "delta"  # deltas again, from the snapshot
            await acked(h, "haproxy-a", 3)

    run(body())


def test_an_agent_without_deltas_gets_snapshots_beside_one_with() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            old = agent(h, "haproxy-a", accepts_deltas=False)
            new = agent(h, "haproxy-b")
            for each in (old, new):
                await each.hello()
                await receive_and_ack(each)
            await acked(h, "haproxy-a", 1)
            await acked(h, "haproxy-b", 1)
            h.publish({W1: snapshot(W1, "10.0.0.2")}, PODS)
            assert (await receive_and_ack(old)).WhichOneof("message") == "snapshot"
            assert (await receive_and_ack(new)).WhichOneof("message") == "delta"
            assert [s.deltas for s in await h.agents()] == [False, True]

    run(body())


def no_deltas(store: SnapshotStore) -> ControlPlaneServer:
    return ControlPlaneServer(store, ServerOptions(stream=StreamLimits(deltas=False)))


def test_no_deltas_sends_full_snapshots_to_everyone() -> None:
    async def body() -> None:
        async with Harness(no_deltas) as h:
            h.publish({W1: snapshot(W1, "10.0.0.1")}, PODS)
            a = agent(h, "haproxy-a")
            await a.hello()
            for version in (1, 2, 3):
                if version > 1:
                    h.publish({W1: snapshot(W1, *(f"10.0.0.{i}" for i in range(version)))}, PODS)
                assert (await receive_and_ack(a)).WhichOneof("message") == "snapshot"
                await acked(h, "haproxy-a", version)
            assert [s.deltas for s in await h.agents()] == [False]
            assert sample(h, "peerplane_deltas_sent_total", workload=W1) == 0

    run(body())


def test_the_no_deltas_flag_reaches_the_stream_limits() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    base = ["--source", "files:/x", "--insecure"]
    assert server_options(parser.parse_args(base), None).stream.deltas
    assert not server_options(parser.parse_args([*base, "--no-deltas"]), None).stream.deltas


def test_the_retained_versions_flag_sizes_the_window() -> None:
    """`--retained-versions N` keeps N contents per workload; 1 keeps no base (full
    snapshots only); 0 is refused by the parser."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    base = ["--source", "files:/x", "--insecure"]
    assert snapshot_store(parser.parse_args(base)).retained_versions == 16
    store = snapshot_store(parser.parse_args([*base, "--retained-versions", "1"]))
    first, second = (snapshot(W1, "10.0.0.1"), snapshot(W1, "10.0.0.2"))
    store.publish({W1: first})
    store.publish({W1: second})
    current = store.get(W1)
    assert current is not None and current.bases == frozenset()
    assert store.delta_message(W1, second.content_hash, first.content_hash) is None
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--retained-versions", "0"])


def test_the_byte_budget_flags_size_the_store(capsys: pytest.CaptureFixture[str]) -> None:
    """`--retained-bytes` and `--delta-cache-bytes` reach the store (0 = unbounded); a
    negative, fractional or absurd value is a usage error naming the flag."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    base = ["--source", "files:/x", "--insecure"]
    store = snapshot_store(parser.parse_args(base))
    assert (store.retained_budget, store.delta_cache_budget) == (64 << 20, 32 << 20)
    store = snapshot_store(
        parser.parse_args([*base, "--retained-bytes", "1000", "--delta-cache-bytes", "0"])
    )
    assert (store.retained_budget, store.delta_cache_budget) == (1000, 0)
    for flag in ("--retained-bytes", "--delta-cache-bytes"):
        for value in ("-1", "1e6", "64Mi", str(2**41)):
            with pytest.raises(SystemExit) as stopped:
                parser.parse_args([*base, flag, value])
            assert stopped.value.code == 2
            assert f"argument {flag}:" in capsys.readouterr().err


def test_an_agent_on_an_evicted_base_gets_the_full_snapshot() -> None:
    """The retained-bytes budget is shared by all workloads: another workload's changes
    evict this one's old base. An agent that comes back holding it gets the full
    snapshot (materialized and hash-checked by the agent), not a delta it cannot apply
    and not an error; the metrics stay within the budgets."""
    budget = 2000
    pods = {**PODS, f"{NS}/edge-a": W2}

    async def body() -> None:
        async with Harness(store=SnapshotStore(retained_bytes=budget)) as h:
            h.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")}, pods)
            a = agent(h, "haproxy-a")
            await a.hello()
            await receive_and_ack(a)
            await acked(h, "haproxy-a", 1)
            held = a.held
            assert held is not None
            a.close()

            w1 = snapshot(W1, "10.0.0.1", "10.0.0.2")
            addresses = ["10.0.9.1"]
            h.publish({W1: w1, W2: snapshot(W2, *addresses)}, pods)
            current = h.store.get(W1)
            assert current is not None and held.content_hash in current.bases
            while held.content_hash in current.bases:  # W2 changes until W1's base goes
                assert len(addresses) < 60, "the budget never evicted W1's base"
                addresses.append(f"10.0.9.{len(addresses) + 1}")
                h.publish({W1: w1, W2: snapshot(W2, *addresses)}, pods)
                assert h.store.retained_bytes <= budget
                current = h.store.get(W1)
                assert current is not None
            assert current.version == 2  # W1's current version is kept

            back = agent(h, "haproxy-a")
            await back.hello(held.content_hash, 1)
            message = await receive_and_ack(back)
            assert message.WhichOneof("message") == "snapshot"
            assert back.held == current.snapshot()
            await acked(h, "haproxy-a", 2)

            edge = agent(h, "edge-a")  # a base still retained: a delta, as before
            previous = snapshot(W2, *addresses[:-1])
            await edge.hello(previous.content_hash, 1)
            raw = await edge.recv_raw()
            assert pb.ServerMessage.FromString(raw).WhichOneof("message") == "delta"
            assert h.store.delta_cache_bytes > 0
            assert 0 < sample(h, "peerplane_retained_bytes") <= budget
            assert sample(h, "peerplane_delta_cache_bytes") == h.store.delta_cache_bytes

    run(body())


def test_reconnect_with_the_current_hash_gets_in_sync() -> None:
    async def body() -> None:
        async with Harness() as h:
            content = snapshot(W1, "10.0.0.1")
            h.publish({W1: content}, PODS)
            a = agent(h, "haproxy-a")
            await a.hello(content.content_hash, 1)
            message, _ = await a.step()
            assert message.WhichOneof("message") == "in_sync"
            assert not message.nonce

    run(body())


def test_a_base_out_of_the_window_gets_the_full_snapshot() -> None:
    async def body() -> None:
        async with Harness() as h:
            h.store.retained_versions = 3
            contents = [snapshot(W1, *(f"10.0.0.{i}" for i in range(n + 1))) for n in range(4)]
            for content in contents:  # versions 1..4: the window holds 2, 3 and 4
                h.publish({W1: content}, PODS)
            gone, kept = agent(h, "haproxy-a"), agent(h, "haproxy-b")
            await gone.hello(contents[0].content_hash, 1)
            assert (await receive_and_ack(gone)).WhichOneof("message") == "snapshot"
            kept.held = contents[1].message(version=2)
            await kept.hello(contents[1].content_hash, 2)
            message = await receive_and_ack(kept)
            assert message.WhichOneof("message") == "delta"
            assert kept.held == contents[3].message(version=4)
            await acked(h, "haproxy-b", 4)

    run(body())


def test_a_change_logs_each_agents_ack_at_info_and_its_delta_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Per change and agent the event loop built, formatted and wrote two INFO lines (the
    delta sent, then its Ack) and set the three retained-versions gauges. The delta line
    is now debug (the publication and each Ack say what operators follow); the gauges are
    set once per version and delta built, not again for every agent it goes to."""

    async def body() -> None:
        async with Harness() as h:
            a, b = await both_on_the_first_version(h)
            retained: list[tuple[Any, ...]] = []
            count = h.server.metrics.retained
            h.server.metrics.retained = lambda *figures: (  # type: ignore[method-assign]
                retained.append(figures),
                count(*figures),
            )[-1]
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="controlplane.server.stream"):
                h.publish({W1: snapshot(W1, "10.0.0.1", "10.0.0.2")}, PODS)
                for each in (a, b):
                    message = await receive_and_ack(each)
                    assert message.WhichOneof("message") == "delta"
                await acked(h, "haproxy-a", 2)
                await acked(h, "haproxy-b", 2)
            stream = [r for r in caplog.records if r.name == "controlplane.server.stream"]
            events = sorted((r.levelname, getattr(r, "event", "")) for r in stream)
            assert events == [("DEBUG", "delta_sent")] * 2 + [("INFO", "ack")] * 2
            # At the publication (the server's store subscriber), then once the delta
            # was built and cached; not again for the second agent (3 before).
            assert len(retained) == 2 and retained[-1][2] > 0
            assert sample(h, "peerplane_retained_versions") == 2

    run(body())
