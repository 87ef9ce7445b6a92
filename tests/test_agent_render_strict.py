"""The renderer's checks match whole values: `$` alone would accept a trailing newline."""

from __future__ import annotations

import pytest

from nodeagent.render import RenderError, RenderOptions, render
from peerplane.v1 import peerplane_pb2 as pb


def snapshot_with(**changes: str) -> pb.Snapshot:
    snap = pb.Snapshot(workload="ns/DaemonSet/haproxy")
    snap.peers.name = "localinstance"
    snap.peers.port = 10000
    snap.peers.peers.add(name=changes.get("peer", "haproxy-a"), address="127.0.1.1", port=10000)
    backend = snap.backends.add(
        name=changes.get("backend", "default_shop_http"), mode="http", balance="hdr"
    )
    backend.balance_argument = changes.get("header", "X-Tenant")
    backend.slots.add(index=1, server_name="SRV_1", address="127.0.2.1", port=8888, enabled=True)
    snap.http_frontend.port = 8080
    snap.http_frontend.routes.add(
        host=changes.get("host", "shop.example.com"), backend=backend.name
    )
    return snap


def test_clean_snapshot_renders() -> None:
    assert "balance hdr(X-Tenant)" in render(snapshot_with(), RenderOptions(pod_name="haproxy-a"))


@pytest.mark.parametrize("field", ["peer", "backend", "header", "host"])
def test_trailing_newline_is_refused(field: str) -> None:
    value = {
        "peer": "haproxy-a",
        "backend": "default_shop_http",
        "header": "X-Tenant",
        "host": "shop.example.com",
    }[field]
    with pytest.raises(RenderError):
        render(snapshot_with(**{field: value + "\n"}), RenderOptions(pod_name="haproxy-a"))


def test_pod_name_with_trailing_newline_is_refused() -> None:
    with pytest.raises(RenderError):
        render(snapshot_with(), RenderOptions(pod_name="haproxy-a\n"))
