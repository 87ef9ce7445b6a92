"""Renderer: the example backend of docs/design.md ("Architecture") byte for byte,
determinism, hostile input, haproxy -c."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from nodeagent import cli
from nodeagent.config.render import RenderError, RenderOptions, haproxy_size, render, render_backend
from nodeagent.haproxy import version
from nodeagent.haproxy.driver import validate
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DESIGN_BACKEND
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = (
    pytest.mark.unit
)  # the renderer: `-m unit` selects it (`haproxy -c` ones: `haproxy` too)


def realistic() -> pb.Snapshot:
    return snapshot(
        peers=[
            ("haproxy-b", "10.244.1.5", 10000),
            ("haproxy-a", "10.244.0.5", 10000),
        ],
        backends=[
            backend("default_shop_http", [("10.244.0.32", 8888), ("10.244.0.33", 8888)]),
            backend(
                "default_api_web",
                [("10.244.2.1", 8080)],
                balance="url_param",
                balance_argument="user",
                hash_type="consistent sdbm avalanche",
            ),
            backend("default_db_5432", [("fd00::12", 5432)], mode="tcp", balance="roundrobin"),
            backend(
                "default_hdr_80", [], balance="hdr", balance_argument="X-User", persistence=False
            ),
        ],
        http_port=8080,
        routes=[("shop.example.com", "default_shop_http"), ("api.example.com", "default_api_web")],
        tcp=[(5432, "default_db_5432")],
    )


def test_design_backend_byte_exact() -> None:
    b = backend("default_shop_http", [("10.244.0.32", 8888), ("10.244.0.33", 8888)], count=2)
    assert "\n".join(render_backend(b)) + "\n" == DESIGN_BACKEND
    full = render(snapshot([("haproxy-a", "10.244.0.5", 10000)], [b]), RenderOptions("haproxy-a"))
    assert DESIGN_BACKEND in full


def test_deterministic_except_localpeer() -> None:
    snap = realistic()
    a = render(snap, RenderOptions("haproxy-a"))
    b = render(snap, RenderOptions("haproxy-b"))
    assert a == render(snap, RenderOptions("haproxy-a"))
    diff = [(x, y) for x, y in zip(a.splitlines(), b.splitlines(), strict=True) if x != y]
    assert diff == [("  localpeer haproxy-a", "  localpeer haproxy-b")]
    # Input order does not matter: peers and routes are sorted.
    shuffled = pb.Snapshot()
    shuffled.CopyFrom(snap)
    shuffled.peers.peers.reverse()
    shuffled.http_frontend.routes.reverse()
    assert render(shuffled, RenderOptions("haproxy-a")) == a


def test_sections_and_lines() -> None:
    cfg = render(realistic(), RenderOptions("haproxy-a", bind_address="127.0.10.1"))
    assert (
        "peers localinstance\n  peer haproxy-a 10.244.0.5:10000\n"
        "  peer haproxy-b 10.244.1.5:10000\n" in cfg
    )
    assert (
        "  stats socket /var/run/haproxy/runtime.sock mode 600 level admin expose-fd listeners"
        in cfg
    )
    assert "defaults\n  mode http\n" in cfg
    assert "  bind 127.0.10.1:8080" in cfg
    assert (
        "  use_backend default_shop_http if { hdr(host),field(1,:),lower -m str shop.example.com }"
        in cfg
    )
    assert (
        "frontend fe_tcp_5432\n  mode tcp\n  bind 127.0.10.1:5432\n"
        "  default_backend default_db_5432" in cfg
    )
    assert "backend default_db_5432\n  mode tcp\n  balance roundrobin\n  stick on src\n" in cfg
    assert "  server SRV_1 [fd00::12]:5432 id 1 enabled" in cfg
    assert "  balance url_param user\n  hash-type consistent sdbm avalanche\n" in cfg
    assert "  balance hdr(X-User)\n  server SRV_1 127.0.0.1:1 id 1 disabled" in cfg
    servers = [ln for ln in cfg.splitlines() if ln.lstrip().startswith("server ")]
    assert len(servers) == 16
    for line in servers:
        name = line.split()[1]
        assert f" id {name.removeprefix('SRV_')} " in line


def test_ipv6_bind_and_peers() -> None:
    snap = snapshot([("haproxy-a", "fd00::5", 10000)], [backend("default_shop_http", [])], 80)
    cfg = render(snap, RenderOptions("haproxy-a", bind_address="::"))
    assert "  peer haproxy-a [fd00::5]:10000" in cfg
    assert "  bind [::]:80" in cfg


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1 << 20, "1m"),
        (1 << 30, "1g"),
        (3 << 10, "3k"),
        (1000, "1000"),
        (1536, "1536"),
        (2 << 30, "2g"),
    ],
)
def test_haproxy_size(value: int, text: str) -> None:
    assert haproxy_size(value) == text


def _bad_url_param(s: pb.Snapshot) -> None:
    s.backends[0].balance, s.backends[0].balance_argument = "url_param", "a b"


def _mutations() -> list[tuple[str, object]]:
    return [
        ("backend name", lambda s: setattr(s.backends[0], "name", "x\n  server evil 1.2.3.4:80")),
        ("host", lambda s: setattr(s.http_frontend.routes[0], "host", "a.com } or { always_true")),
        ("peer name", lambda s: setattr(s.peers.peers[0], "name", "evil name")),
        ("peer address", lambda s: setattr(s.peers.peers[0], "address", "10.0.0.1 ssl")),
        ("server address", lambda s: setattr(s.backends[0].slots[0], "address", "evil.example")),
        ("balance", lambda s: setattr(s.backends[0], "balance", "source\n  option evil")),
        ("url_param", _bad_url_param),
        ("hash-type", lambda s: setattr(s.backends[0], "hash_type", "consistent; evil")),
        ("mode", lambda s: setattr(s.backends[0], "mode", "health")),
        ("slot name", lambda s: setattr(s.backends[0].slots[0], "server_name", "SRV_7")),
        ("port", lambda s: setattr(s.backends[0].slots[0], "port", 70000)),
    ]


@pytest.mark.parametrize(("what", "mutate"), _mutations(), ids=[m[0] for m in _mutations()])
def test_hostile_strings_raise(what: str, mutate: object) -> None:
    snap = realistic()
    assert callable(mutate)
    mutate(snap)
    with pytest.raises(RenderError):
        render(snap, RenderOptions("haproxy-a"))


def test_hostile_pod_name_raises() -> None:
    with pytest.raises(RenderError, match="pod name"):
        render(realistic(), RenderOptions("haproxy-a\n  evil"))


@pytest.mark.haproxy
def test_haproxy_accepts_rendered_config(haproxy_bin: HAProxyBinary) -> None:
    cfg = render(realistic(), RenderOptions("haproxy-a", bind_address="127.0.10.1"))
    assert validate(cfg, haproxy_bin.path) is None


@pytest.mark.haproxy
def test_validate_flags_peers_without_local_peer(haproxy_bin: HAProxyBinary) -> None:
    cfg = render(realistic(), RenderOptions("haproxy-zzz"))
    error = validate(cfg, haproxy_bin.path)
    assert error is not None
    assert "Removing incomplete section 'peers localinstance'" in error


def test_cli_render_from_grpcurl_json(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(json_format.MessageToDict(realistic())))
    assert cli.main(["render", "--snapshot", str(path), "--pod-name", "haproxy-b"]) == 0
    out = capsys.readouterr().out
    # Without --haproxy-version or --haproxy-bin: for the oldest supported version.
    oldest = RenderOptions("haproxy-b", haproxy_version=version.OLDEST_SUPPORTED)
    assert out == render(realistic(), oldest)


def test_cli_render_refuses_a_peers_list_without_the_pod(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Incident: `nodeagent render --pod-name` of a pod not among the snapshot's peers
    printed a peers section without its local peer, which HAProxy then drops; the running
    agent NACKs such a snapshot, so the offline tool refuses it the same way."""
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(json_format.MessageToDict(realistic())))
    assert cli.main(["render", "--snapshot", str(path), "--pod-name", "haproxy-zzz"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "lacks this pod (haproxy-zzz)" in captured.err
