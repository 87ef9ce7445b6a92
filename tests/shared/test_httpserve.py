"""One metrics/health HTTP server for both sides (`peerplane.runtime.httpserve`); each side keeps
its own metric definitions. Real HTTP over loopback."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from controlplane import logformat as control_log
from controlplane.metrics import Metrics, MetricsServer
from nodeagent import logformat as agent_log
from nodeagent.metrics import AgentMetrics
from nodeagent.metrics import MetricsServer as AgentMetricsServer
from peerplane.runtime.httpserve import HttpLimits, MetricsHttpServer
from tests.helpers.waiting import wait_until


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
        # The registries stay apart: the agent's own series only (its persistence gauges
        # are named peerplane_agent_*, the control plane's never are).
        names = {ln.split()[2] for ln in body.decode().splitlines() if ln.startswith("# TYPE")}
        assert all(n.startswith(("nodeagent_", "peerplane_agent_")) for n in names), names
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


def _closed_by_server(sock: socket.socket, within: float = 3.0) -> bool:
    """The server closed (or reset) this connection within `within` seconds."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("sends", [b"", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"])
def test_slow_clients_are_timed_out_and_capped(sends: bytes) -> None:
    """Incident: neither side's metrics port timed out idle connections: 500 of 500 slow
    clients were still held after 60 s (512 threads), and with the agent's descriptors
    taken that way an edit got neither ACK nor NACK. A silent client is closed after the
    idle timeout, one that never finishes its request head after the header timeout
    (the idle timeout set far longer, so only the head's deadline can close it), and
    connections past the cap are closed at accept."""
    limits = (
        HttpLimits(idle_timeout=0.3, header_timeout=30.0, max_connections=3)
        if not sends
        else HttpLimits(idle_timeout=30.0, header_timeout=0.4, max_connections=3)
    )
    server = MetricsHttpServer(CollectorRegistry(), "127.0.0.1", 0, limits=limits).start()
    clients: list[socket.socket] = []
    try:
        for _ in range(3):
            clients.append(socket.create_connection(("127.0.0.1", server.port)))
            clients[-1].sendall(sends)
        wait_until(lambda: server.connections == 3)
        extra = socket.create_connection(("127.0.0.1", server.port))
        clients.append(extra)
        assert _closed_by_server(extra), "a connection past the cap was kept"
        assert all(_closed_by_server(c) for c in clients[:3]), "a slow client was kept"
        wait_until(lambda: server.connections == 0)
        assert _get(server.port, "/healthz")[::2] == (200, b"ok\n")
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_clients_that_reset_write_no_raw_traceback_past_the_json_log(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Incident: clients resetting their connections to the agent's metrics port put
    tracebacks on stderr raw, past `--log-format json` (100 clients: 2,500 non-JSON
    lines). Every line is now a JSON record; a reset is a debug line, not a traceback."""
    agent_log.configure("INFO", "json")
    quiet = logging.getLogger("peerplane.httpserve")
    quiet.setLevel(logging.DEBUG)
    server = AgentMetricsServer(AgentMetrics(), "127.0.0.1", 0).start()
    try:
        for _ in range(20):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x")  # unfinished: the server reads
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # RST

        def handlers_done() -> bool:
            names = [t.name for t in threading.enumerate()]
            return not any("process_request_thread" in n for n in names)

        wait_until(handlers_done)
    finally:
        server.stop()
        quiet.setLevel(logging.NOTSET)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    records = [json.loads(ln) for ln in lines]  # every line is JSON
    assert any("went away" in r["message"] for r in records)
    assert not any("exception" in r for r in records)
