"""A route rule's timeouts on a real HAProxy (each installed version): the rule's frontend
sets `txn.tmo` once it won and the backend section applies it with `http-request
set-timeout server`, so a backend silent past the limit gets a 504 for that rule only;
"0s" (0 on the wire) lifts the limit; the other rules of the same backend, and the next
request on the same connection, keep the backend's `timeout server`.

docs/annotations.md, "Rule `timeouts`"."""

from __future__ import annotations

import http.client
import time
from pathlib import Path

import pytest

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import (
    backend,
    free_port,
    loopback_net,
    running_instance,
    slow_server,
)
from tests.helpers.haproxy_env import snapshot as make_snapshot
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = pytest.mark.haproxy

HOST = "t.example.com"
SLOW = 0.8  # seconds the backend waits before answering a delayed request
LIMIT_MS = 300


def timed_rule(path: str, timeouts: pb.Timeouts | None) -> pb.RouteRule:
    r = pb.RouteRule(source=f"HTTPRoute ns/t {path}", hostnames=[HOST])
    r.path.CopyFrom(pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value=path))
    r.backends.add(backend="ns_slow_80", weight=1)
    if timeouts is not None:
        r.timeouts.CopyFrom(timeouts)
    return r


def ask(conn: http.client.HTTPConnection, path: str) -> tuple[int, float]:
    started = time.monotonic()
    conn.request("GET", path, headers={"Host": HOST})
    reply = conn.getresponse()
    reply.read()
    return reply.status, time.monotonic() - started


def test_a_rules_timeout_cuts_a_silent_backend_for_that_rule_only(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    net = loopback_net()
    with (
        slow_server(f"{net}.11") as end,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        port = free_port(inst.ip)
        snap = make_snapshot(
            [("pod-a", inst.ip, free_port(inst.ip))],
            [backend("ns_slow_80", [end], balance="roundrobin", persistence=False)],
        )
        snap.http_listeners.add(
            port=port,
            rules=[
                timed_rule("/short", pb.Timeouts(server_timeout_ms=LIMIT_MS)),
                timed_rule("/off", pb.Timeouts()),  # "0s": no limit
                timed_rule("/plain", None),
            ],
        )
        result = inst.applier.apply(snap)
        assert result.ok, result.error
        conn = http.client.HTTPConnection(inst.ip, port, timeout=5)
        try:
            assert ask(conn, "/short")[0] == 200
            status, took = ask(conn, f"/short?delay={SLOW}")
            assert status == 504 and LIMIT_MS / 1000 <= took < SLOW, (status, took)
            conn.close()  # HAProxy closes after a 504: a new connection for the rest
            for path in ("/off", "/plain"):
                status, took = ask(conn, f"{path}?delay={SLOW}")
                assert status == 200 and took >= SLOW, (path, status, took)
            # The limit is the winning rule's, per request: not carried to the next one.
            assert ask(conn, "/short")[0] == 200
            assert ask(conn, f"/plain?delay={SLOW}")[0] == 200
        finally:
            conn.close()
        # No rule with timeouts left: no backend applies `txn.tmo` (nothing sets it), and
        # back again when a rule sets it (every backend rendered again, HAProxy reloaded).
        for version, limit in ((2, None), (3, pb.Timeouts(server_timeout_ms=LIMIT_MS))):
            snap.version, snap.content_hash = version, f"{version:064x}"
            del snap.http_listeners[0].rules[:]
            snap.http_listeners[0].rules.extend(
                [timed_rule("/short", limit), timed_rule("/plain", None)]
            )
            result = inst.applier.apply(snap)
            assert result.ok, result.error
            text = Path(inst.config_path).read_text()
            assert ("set-timeout server" in text) is (limit is not None)
            conn = http.client.HTTPConnection(inst.ip, port, timeout=5)
            try:
                status, took = ask(conn, f"/short?delay={SLOW}")
                assert (status == 504) is (limit is not None), (version, status, took)
            finally:
                conn.close()
