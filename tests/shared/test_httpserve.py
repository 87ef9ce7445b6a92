"""One metrics/health HTTP server for both sides (`peerplane.httpserve`); each side keeps
its own metric definitions. Real HTTP over loopback."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

import pytest

from controlplane import logformat as control_log
from controlplane.metrics import Metrics, MetricsServer
from nodeagent import logformat as agent_log
from nodeagent.metrics import AgentMetrics
from nodeagent.metrics import MetricsServer as AgentMetricsServer


def _get(port: int, path: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def test_control_plane_server_serves_metrics_health_and_readiness() -> None:
    metrics = Metrics()
    metrics.published("ns/DaemonSet/haproxy", 7)
    ready = [False]
    server = MetricsServer(metrics, "127.0.0.1", 0, lambda: ready[0]).start()
    try:
        code, kind, body = _get(server.port, "/metrics")
        assert code == 200 and kind.startswith("text/plain; version=")
        assert b'peerplane_snapshot_version{workload="ns/DaemonSet/haproxy"} 7.0' in body
        assert _get(server.port, "/healthz")[::2] == (200, b"ok\n")
        assert _get(server.port, "/readyz?verbose")[::2] == (503, b"not serving\n")
        ready[0] = True
        assert _get(server.port, "/readyz")[::2] == (200, b"ok\n")
        assert _get(server.port, "/other")[::2] == (404, b"not found\n")
    finally:
        server.stop()


def test_agent_server_serves_its_own_metrics_and_has_no_readiness(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = AgentMetrics()
    metrics.reloads.inc()
    with caplog.at_level(logging.INFO, logger="nodeagent.metrics"):
        server = AgentMetricsServer(metrics, "127.0.0.1", 0).start()
    try:
        assert f"metrics on http://127.0.0.1:{server.port}/metrics" in caplog.text
        code, _, body = _get(server.port, "/metrics")
        assert code == 200 and b"nodeagent_reloads_total 1.0" in body
        assert b"peerplane_" not in body  # the registries stay apart
        assert _get(server.port, "/healthz")[::2] == (200, b"ok\n")
        assert _get(server.port, "/readyz")[0] == 404
    finally:
        server.stop()


def test_each_side_declares_only_its_log_fields_on_the_one_formatter() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "applied", None, None)
    record.__dict__.update(agent_log.fields(path="runtime", version=3))
    agent_line = agent_log.JsonFormatter().format(record)
    assert '"path": "runtime"' in agent_line and '"version": 3' in agent_line
    assert '"path"' not in control_log.JsonFormatter().format(record)  # not a control field
    with pytest.raises(ValueError, match="unknown log fields"):
        control_log.fields(path="runtime")
    assert agent_log.LOG_FORMATS == control_log.LOG_FORMATS == ("text", "json")
