"""The backend protocol on the server lines (`Backend.protocol`): `proto h2` (and its HTTP
checks in HTTP/2), TLS not verified for WebSocket over TLS (its checks over TLS too),
nothing for HTTP/1.1 and WebSocket, and a value the agent does not know, or one on a
mode-tcp backend, refused by name. On real HAProxy: tests/agent/test_protocols_haproxy.py."""

from __future__ import annotations

import pytest

from nodeagent.config.render import RenderError, render_backend
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend

pytestmark = pytest.mark.unit


def _server(protocol: str, http_path: str | None = None) -> str:
    b = backend("default_rpc_grpc", [("10.244.0.32", 9000)], count=1, persistence=False)
    b.protocol = protocol
    if http_path is not None:
        b.check.CopyFrom(pb.HealthCheck(interval_ms=500, rise=2, fall=3, http_path=http_path))
    return render_backend(b)[-1]


def test_each_protocol_on_the_server_line() -> None:
    enabled = "  server SRV_1 10.244.0.32:9000 id 1 enabled"
    check = " check inter 500 rise 2 fall 3"
    assert _server("") == enabled
    assert _server("ws") == enabled
    assert _server("h2") == enabled + " proto h2"
    assert _server("h2", "") == enabled + " proto h2" + check
    assert _server("h2", "/healthz") == enabled + " proto h2 check-proto h2" + check
    assert _server("wss") == enabled + " ssl verify none"
    assert _server("wss", "") == enabled + " ssl verify none check-ssl" + check


@pytest.mark.parametrize("protocol", ["h3", "H2", "h2 ssl", "h2\n  http-request deny"])
def test_an_unknown_protocol_is_refused(protocol: str) -> None:
    with pytest.raises(RenderError, match="default_rpc_grpc: invalid protocol"):
        _server(protocol)


def test_a_protocol_on_a_tcp_backend_is_refused() -> None:
    b = backend("default_db_5432", [("10.244.0.32", 5432)], mode="tcp", persistence=False)
    b.protocol = "h2"
    with pytest.raises(RenderError, match="protocol h2 in mode tcp"):
        render_backend(b)
