"""The renderer's checks match whole values: `$` alone would accept a trailing newline."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from nodeagent.config.render import RenderError, RenderOptions, render
from nodeagent.haproxy.driver import command, validate
from peerplane import limits
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend, free_port, loopback_net, snapshot
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until


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


@pytest.mark.unit  # pure
def test_clean_snapshot_renders() -> None:
    assert "balance hdr(X-Tenant)" in render(snapshot_with(), RenderOptions(pod_name="haproxy-a"))


@pytest.mark.parametrize("field", ["peer", "backend", "header", "host"])
@pytest.mark.unit  # pure
def test_trailing_newline_is_refused(field: str) -> None:
    value = {
        "peer": "haproxy-a",
        "backend": "default_shop_http",
        "header": "X-Tenant",
        "host": "shop.example.com",
    }[field]
    with pytest.raises(RenderError):
        render(snapshot_with(**{field: value + "\n"}), RenderOptions(pod_name="haproxy-a"))


@pytest.mark.unit  # pure
def test_pod_name_with_trailing_newline_is_refused() -> None:
    with pytest.raises(RenderError):
        render(snapshot_with(), RenderOptions(pod_name="haproxy-a\n"))


# The longest backend name compute builds from valid Kubernetes names
# (63-character namespace and Service, 15-character port name), and the agent's own bound.
LONGEST_BUILT = f"{'n' * 63}_{'s' * 63}_{'p' * 15}"
LONGEST_ACCEPTED = f"n_{'b' * (limits.MAX_PROXY_NAME - 4)}_p"


@pytest.mark.parametrize("name", [LONGEST_BUILT, LONGEST_ACCEPTED])
@pytest.mark.unit  # pure
def test_long_backend_names_render(name: str) -> None:
    cfg = render(snapshot_with(backend=name), RenderOptions(pod_name="haproxy-a"))
    assert f"backend {name}\n" in cfg and f"use_backend {name} if" in cfg


@pytest.mark.parametrize(
    "name", [LONGEST_ACCEPTED + "b", "_leading", "with:colon", "sp ace", "nl\nx", ""]
)
@pytest.mark.unit  # pure
def test_backend_names_past_the_shared_limit_are_refused(name: str) -> None:
    with pytest.raises(RenderError, match="backend name"):
        render(snapshot_with(backend=name), RenderOptions(pod_name="haproxy-a"))


def long_name_snapshot(peers: list[tuple[str, str, int]], http_port: int) -> pb.Snapshot:
    """Both long names as persistent HTTP and TCP backends, stick tables replicated."""
    backends = [
        backend(LONGEST_BUILT, [("127.0.0.1", 1)]),
        backend(LONGEST_ACCEPTED, [("127.0.0.1", 1)], mode="tcp", balance="roundrobin"),
    ]
    return snapshot(
        peers,
        backends,
        http_port=http_port,
        routes=[("shop.example.com", LONGEST_BUILT)],
        tcp=[(http_port + 1, LONGEST_ACCEPTED)],
    )


@pytest.mark.haproxy
def test_haproxy_accepts_the_longest_backend_names(haproxy_bin: HAProxyBinary) -> None:
    snap = long_name_snapshot([("haproxy-a", "127.0.0.1", 10000)], 8080)
    cfg = render(snap, RenderOptions(pod_name="haproxy-a"))
    assert validate(cfg, haproxy_bin.path) is None


@pytest.mark.haproxy
def test_stick_table_with_the_longest_name_replicates(
    haproxy_bin: HAProxyBinary, tmp_path: Path
) -> None:
    """A name `haproxy -c` accepts must also work where it matters: peers replicate the
    stick table by its name."""
    net = loopback_net()
    pods = {"pod-a": f"{net}.1", "pod-b": f"{net}.2"}
    peer_port = {pod: free_port(ip) for pod, ip in pods.items()}
    http_port = free_port(pods["pod-a"])
    peers = [(pod, ip, peer_port[pod]) for pod, ip in pods.items()]
    snap = long_name_snapshot(peers, http_port)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for pod, ip in pods.items():
            # One peer port per pod on its own address: the section's port is per peer.
            sock = str(tmp_path / f"{pod}.sock")
            cfg = tmp_path / f"{pod}.cfg"
            cfg.write_text(render(snap, RenderOptions(pod, bind_address=ip, runtime_socket=sock)))
            procs[pod] = subprocess.Popen(
                [haproxy_bin.path, "-db", "-f", str(cfg)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        sockets = {pod: str(tmp_path / f"{pod}.sock") for pod in pods}
        wait_until(lambda: all(os.path.exists(s) for s in sockets.values()), 10)
        for name in (LONGEST_BUILT, LONGEST_ACCEPTED):

            def replicated(name: str = name) -> bool:
                command(sockets["pod-a"], f"set table {name} key 10.9.8.7 data.server_id 1")
                return "key=10.9.8.7" in command(sockets["pod-b"], f"show table {name}")

            wait_until(replicated, 15, name, step=0.2)
    finally:
        for proc in procs.values():
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize(
    "hostile",
    [
        {"cookie": "s\n  http-request deny"},
        {"cookie": "s max-age"},
        {"header": "X-S)\n  acl x always_true"},
        {"max_age": limits.MAX_EXPIRE_MS},
    ],
)
@pytest.mark.unit  # pure
def test_session_persistence_names_and_lifetimes_are_checked(hostile: dict[str, object]) -> None:
    """A cookie or header name reaches haproxy.cfg only when it matches the shared pattern
    (`peerplane/session.py`), and a lifetime only within its bound."""
    snap = snapshot_with()
    backend = snap.backends[0]
    if "header" in hostile:
        backend.session_header.name = str(hostile["header"])
        backend.session_header.table_size = 1024
        backend.session_header.expire_ms = 1000
    else:
        backend.session_cookie.name = str(hostile.get("cookie", "s"))
        backend.session_cookie.max_age_s = int(str(hostile.get("max_age", 0)))
    with pytest.raises(RenderError):
        render(snap, RenderOptions(pod_name="haproxy-a"))
    fine = snapshot_with()
    fine.backends[0].session_cookie.name = "s"
    fine.backends[0].session_cookie.max_idle_s = 60
    rendered = render(fine, RenderOptions(pod_name="haproxy-a"))
    assert "  cookie s insert indirect nocache maxidle 60s" in rendered
    assert "server SRV_1 127.0.2.1:8888 id 1 enabled cookie SRV_1" in rendered
