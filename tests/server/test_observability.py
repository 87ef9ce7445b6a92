"""Metrics over HTTP and JSON logs from a real `controlplane serve`, after a real ACK and
NACK on agent streams."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.server_harness import Agent, run
from tests.helpers.server_process import ROOT, ServeProcess
from tests.helpers.waiting import wait_until_async

DEMO = ROOT / "deploy" / "examples" / "demo"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
BAD_SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: odd
  namespace: default
  annotations:
    haproxy.org/expose: "true"
    haproxy.org/load-balance: "roundrobin\\n  server evil 1.2.3.4:80"
spec:
  ports: [{name: http, port: 80}]
"""


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def scraped(port: int, key: tuple[str, tuple[tuple[str, str], ...]]) -> float | None:
    """One sample of a scrape made off the event loop (None: not exported yet), for
    waiting on the server from inside a test's agents."""
    return samples((await asyncio.to_thread(scrape, port))[1]).get(key)


async def ack_one_nack_one(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        good, bad = Agent(channel, "haproxy-7x2kq"), Agent(channel, "haproxy-m4r9t")
        for agent in (good, bad):
            await agent.hello()
        await good.ack(await good.recv_snapshot())
        await bad.nack(await bad.recv_snapshot(), "haproxy -c: [ALERT] parsing failed")
        for agent in (good, bad):
            await agent.call.done_writing()
        for agent in (good, bad):
            # The server ends the call once it has read everything: closing the channel
            # before that would cancel the call and could drop the unread Nack.
            await asyncio.wait_for(agent.call.code(), 10)


def test_metrics_and_json_logs_after_an_ack_and_a_nack(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    (manifests / "odd.yaml").write_text(BAD_SERVICE)
    args = ("--source", f"files:{manifests}", "--metrics-port", "0", "--log-format", "json")
    with ServeProcess(*args) as serve:
        port = int(serve.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        serve.wait_for(re.compile(r'"event": "published"'))
        run(ack_one_nack_one(serve.address))
        serve.wait_for(re.compile(r'"event": "nack"'))
        serve.wait_for(re.compile(r'"event": "ack"'))
        serve.wait_for(
            re.compile(
                r'"event": "disconnected".*haproxy-m4r9t|haproxy-m4r9t.*"event": "disconnected"'
            )
        )
        assert scrape(port, "/readyz")[0] == 200
        assert scrape(port, "/healthz")[0] == 200
        code, text = scrape(port)
        assert code == 200
        found = samples(text)
        w = (("workload", WORKLOAD),)
        assert found[("peerplane_snapshot_version", w)] == 1
        assert found[("peerplane_acks_total", w)] == 1
        assert found[("peerplane_nacks_total", w)] == 1
        assert found[("peerplane_snapshots_sent_total", w)] == 2
        assert found[("peerplane_push_latency_seconds_count", ())] == 1
        assert found[("peerplane_compute_duration_seconds_count", ())] >= 1
        assert found[("peerplane_connected_agents", ())] == 0
        assert found[("peerplane_leader", ())] == 1
        rejected = (("key", "haproxy.org/load-balance"), ("kind", "Service"))
        assert found[("peerplane_rejections_total", rejected)] == 1
        assert serve.terminate() == 0

    records = []
    for line in serve.lines:
        record = json.loads(line)  # every line is one JSON object
        assert {"time", "level", "logger", "message"} <= set(record), line
        records.append(record)
    by_event: dict[str, list[dict[str, object]]] = {}
    for record in records:
        by_event.setdefault(str(record.get("event", "")), []).append(record)
    (published,) = [r for r in by_event["published"] if r["workload"] == WORKLOAD]
    assert published["version"] == 1 and len(str(published["content_hash"])) == 64
    sent = {r["agent"] for r in by_event["snapshot_sent"]}
    assert sent == {"haproxy-system/haproxy-7x2kq", "haproxy-system/haproxy-m4r9t"}
    assert all(r["workload"] == WORKLOAD and r["version"] == 1 for r in by_event["snapshot_sent"])
    (ack,) = by_event["ack"]
    assert ack["agent"] == "haproxy-system/haproxy-7x2kq" and ack["version"] == 1
    (nack,) = by_event["nack"]
    assert nack["agent"] == "haproxy-system/haproxy-m4r9t" and nack["level"] == "warning"
    assert "parsing failed" in str(nack["reason"])
    (rejection,) = by_event["rejected"]
    assert rejection["key"] == "haproxy.org/load-balance" and rejection["kind"] == "Service"


async def acks_counted(port: int, count: int) -> None:
    """Wait until the server counted `count` ACKs of the workload: an ACK still unread
    when the next version is sent is stale by the protocol (its nonce is no longer the
    last sent) and not counted, so a change must wait for the ACKs before it."""
    key = ("peerplane_acks_total", (("workload", WORKLOAD),))

    async def counted() -> bool:
        return await scraped(port, key) == count

    await wait_until_async(counted, 10, f"{count} ACKs counted")


async def two_agents_ack_a_change(address: str, port: int, change: Callable[[], None]) -> None:
    """Two agents ACK the first version, a manifest changes once the server has counted
    both ACKs, both ACK the next one."""
    async with grpc.aio.insecure_channel(address) as channel:
        agents = [Agent(channel, "haproxy-7x2kq"), Agent(channel, "haproxy-m4r9t")]
        for agent in agents:
            await agent.hello()
            await agent.ack(await agent.recv_snapshot())
        await acks_counted(port, 2)
        change()
        for agent in agents:
            message = await agent.recv_snapshot()
            assert message.snapshot.version == 2
            await agent.ack(message)
        for agent in agents:
            await agent.call.done_writing()
        for agent in agents:
            await asyncio.wait_for(agent.call.code(), 10)


def catalog_renamed(manifests: Path, scratch: Path) -> Callable[[], None]:
    """A change to the demo's catalog host, written atomically (a temporary file, then a
    rename), as editors and kubectl cp do."""
    catalog = manifests / "catalog.yaml"

    def change() -> None:
        written = scratch / "catalog.yaml.tmp"
        written.write_text(catalog.read_text().replace("catalog.example.com", "c2.example.com"))
        os.replace(written, catalog)

    return change


def test_a_change_acked_by_both_agents_is_one_convergence_observation(tmp_path: Path) -> None:
    """peerplane_convergence_seconds: from the folder source seeing the change to the last
    of the workload's two connected agents ACKing it, observed once."""
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    change = catalog_renamed(manifests, tmp_path)

    args = ("--source", f"files:{manifests}", "--metrics-port", "0", "--log-format", "json")
    with ServeProcess(*args) as serve:
        port = int(serve.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        serve.wait_for(re.compile(r'"event": "published"'))
        run(two_agents_ack_a_change(serve.address, port, change))
        for pod in ("haproxy-7x2kq", "haproxy-m4r9t"):
            serve.wait_for(re.compile(rf'"event": "disconnected".*{pod}|{pod}.*"event": "disco'))
        found = samples(scrape(port)[1])
        assert found[("peerplane_acks_total", (("workload", WORKLOAD),))] == 4
        assert found[("peerplane_convergence_seconds_count", ())] == 1
        assert 0 < found[("peerplane_convergence_seconds_sum", ())] < 10
        assert serve.terminate() == 0


async def an_agent_in_sync_is_not_waited_for(
    address: str, port: int, change: Callable[[], None]
) -> None:
    """B ACKs v1 and receives v2; A reconnects already running v2 (told InSync, it ACKs
    nothing); B's ACK of v2 is then the last one the change waits for."""
    async with grpc.aio.insecure_channel(address) as channel:
        agent_b = Agent(channel, "haproxy-m4r9t")
        await agent_b.hello()
        await agent_b.ack(await agent_b.recv_snapshot())
        change()
        second = await agent_b.recv_snapshot()
        agent_a = Agent(channel, "haproxy-7x2kq")
        await agent_a.hello(second.snapshot.content_hash, second.snapshot.version)
        assert (await agent_a.recv()).WhichOneof("message") == "in_sync"
        await agent_b.ack(second)
        # Observed at B's ACK, both streams still open (not when A disconnects).
        key = ("peerplane_convergence_seconds_count", ())
        await wait_until_async(
            lambda: scraped(port, key), 3, "a convergence observation at B's ACK"
        )
        assert await scraped(port, key) == 1
        for agent in (agent_a, agent_b):
            await agent.call.done_writing()
        for agent in (agent_a, agent_b):
            await asyncio.wait_for(agent.call.code(), 10)


def test_an_agent_told_in_sync_does_not_hold_convergence(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    change = catalog_renamed(manifests, tmp_path)

    args = ("--source", f"files:{manifests}", "--metrics-port", "0", "--log-format", "json")
    with ServeProcess(*args) as serve:
        port = int(serve.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        serve.wait_for(re.compile(r'"event": "published"'))
        run(an_agent_in_sync_is_not_waited_for(serve.address, port, change))
        for pod in ("haproxy-7x2kq", "haproxy-m4r9t"):
            serve.wait_for(re.compile(rf'"event": "disconnected".*{pod}|{pod}.*"event": "disco'))
        found = samples(scrape(port)[1])
        assert found[("peerplane_convergence_seconds_count", ())] == 1
        assert serve.terminate() == 0
