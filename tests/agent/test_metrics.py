"""Agent metrics scraped over HTTP after real applies (reload, runtime, NACK, HAProxy
restart), and the JSON decision lines of `--log-format json`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import urllib.request

import pytest

from nodeagent.logformat import JsonFormatter
from nodeagent.metrics import MetricsServer
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_client import FakePlane, demo_snapshot, running, serve, within
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_env import (
    free_port,
    http_get,
    identity_server,
)
from tests.helpers.waiting import wait_until_async

pytestmark = pytest.mark.haproxy


def scrape(port: int) -> dict[str, float]:
    """`/metrics` as {series with labels: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    series = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            series[name] = float(value)
    return series


class JsonLines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_metrics_after_reload_runtime_nack_and_haproxy_restart(agents: AgentHarness) -> None:
    net, port = agents.net, agents.port
    inst = agents.instance()
    ip = inst.ip
    metrics = inst.applier.metrics
    inst.supervisor.on_restart = metrics.haproxy_restarts.inc
    server = MetricsServer(metrics, "127.0.0.1", 0)
    server.start()
    client = agents.client(inst.applier)
    lines = JsonLines()
    agent_log = logging.getLogger("nodeagent")
    agent_log.addHandler(lines)
    level = agent_log.level
    agent_log.setLevel(logging.INFO)

    async def scenario() -> dict[str, float]:
        with (
            identity_server(f"{net}.11", "pod-11") as p11,
            identity_server(f"{net}.12", "pod-12") as p12,
        ):
            http_port = free_port(ip)
            v3 = demo_snapshot(ip, (f"{net}.11", p11), http_port, 3)
            v4 = pb.Snapshot()
            v4.CopyFrom(v3)
            v4.version, v4.content_hash = 4, "4" * 64
            v4.backends[0].slots[0].address, v4.backends[0].slots[0].port = f"{net}.12", p12
            v5 = pb.Snapshot()
            v5.CopyFrom(v4)
            v5.version, v5.content_hash = 5, "5" * 64
            v5.http_frontend.routes.add(host="ghost.example.com", backend="default_ghost_80")
            plane = FakePlane([v3, v4, v5])
            async with serve(plane, port), running(client):
                kinds = [(await within(plane.answers.get())).WhichOneof("message") for _ in "abc"]
                assert kinds == ["ack", "ack", "nack"]
                body = await asyncio.to_thread(http_get, ip, http_port, "shop.example.com")
                assert body == "pod-12"
                connected = scrape(server.port)
            master = inst.supervisor.pid
            assert master is not None
            os.kill(master, signal.SIGKILL)
            await wait_until_async(lambda: metrics.haproxy_restarts._value.get() >= 1, 15)
        return connected

    try:
        connected = asyncio.run(within(scenario(), 60))
        after = scrape(server.port)
    finally:
        agent_log.removeHandler(lines)
        agent_log.setLevel(level)
        server.stop()
    assert connected["nodeagent_connected"] == 1
    assert connected["nodeagent_applied_version"] == 4
    assert connected["nodeagent_reloads_total"] == 1
    assert connected["nodeagent_runtime_updates_total"] == 1
    assert connected["nodeagent_acks_sent_total"] == 2
    assert connected["nodeagent_nacks_sent_total"] == 1
    assert connected["nodeagent_validation_failures_total"] == 1
    assert connected['nodeagent_apply_duration_seconds_count{path="reload"}'] == 1
    assert connected['nodeagent_apply_duration_seconds_count{path="runtime"}'] == 1
    assert after["nodeagent_haproxy_restarts_total"] == 1
    assert after["nodeagent_connected"] == 0

    decisions = [(x.get("event"), x.get("path"), x.get("version")) for x in lines.lines]
    assert ("ack", "reload", 3) in decisions and ("ack", "runtime", 4) in decisions
    assert ("nack", "reload", 5) in decisions
    reload_line = next(x for x in lines.lines if str(x["message"]).startswith("workload="))
    assert reload_line["workload"] == "haproxy-system/DaemonSet/haproxy"
    assert reload_line["path"] == "reload" and reload_line["version"] == 3
