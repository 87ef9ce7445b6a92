"""Renderer: health-check lines, version-dependent keywords, `nodeagent render` versions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from google.protobuf import json_format

from nodeagent import cli
from nodeagent.config.errors import BackendRefused
from nodeagent.config.render import RenderError, RenderOptions, render, render_backend
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_render import realistic
from tests.helpers.haproxy_env import backend
from tests.helpers.haproxy_versions import HAProxyBinary

pytestmark = (
    pytest.mark.unit
)  # the renderer: `-m unit` selects it (`haproxy -c` ones: `haproxy` too)


def test_health_check_lines() -> None:
    b = backend("default_shop_http", [("10.244.0.32", 8888)], count=2)
    b.check.CopyFrom(pb.HealthCheck(interval_ms=500, rise=2, fall=3, http_path="/healthz"))
    assert render_backend(b)[-4:] == [
        "  option httpchk GET /healthz",
        "  http-check expect status 200-399",
        "  server SRV_1 10.244.0.32:8888 id 1 enabled check inter 500 rise 2 fall 3",
        "  server SRV_2 127.0.0.1:1 id 2 disabled check inter 500 rise 2 fall 3",
    ]
    b.check.http_path = ""
    assert not any("httpchk" in line for line in render_backend(b))
    b.ClearField("check")  # a snapshot from a control plane without checks: none rendered
    assert not any(" check" in line for line in render_backend(b))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("interval_ms", 0),
        ("interval_ms", 99),
        ("interval_ms", 3_600_001),
        ("rise", 0),
        ("fall", 101),
        ("http_path", "healthz"),
        ("http_path", "/x\n  http-request deny"),
        ("http_path", "/a b"),
        ("http_path", "/x#y"),
        ("http_path", '/x"y'),
    ],
)
def test_hostile_health_check_raises(field: str, value: object) -> None:
    b = backend("default_shop_http", [("10.244.0.32", 8888)])
    b.check.CopyFrom(pb.HealthCheck(interval_ms=2000, rise=2, fall=3))
    setattr(b.check, field, value)
    with pytest.raises(RenderError):
        render_backend(b)


def test_check_http_on_a_tcp_backend_raises() -> None:
    b = backend("default_db_5432", [("10.244.0.32", 5432)], mode="tcp")
    b.check.CopyFrom(pb.HealthCheck(interval_ms=2000, rise=2, fall=3, http_path="/healthz"))
    with pytest.raises(RenderError):
        render_backend(b)


def test_version_dependent_keywords() -> None:
    b = backend("default_api_web", [("10.244.2.1", 8080)], hash_type="consistent", count=1)
    server = "  server SRV_1 10.244.2.1:8080 id 1 enabled"
    table = "  stick-table type ip size 1m expire 1800000"
    for serving, srvkey, hash_key in (
        (None, False, False),
        ((2, 3), False, False),
        ((2, 4), True, False),
        ((2, 6), True, False),
        ((3, 0), True, True),
        ((3, 2), True, True),
    ):
        lines = render_backend(b, haproxy_version=serving)
        assert (f"{table} srvkey addr peers localinstance" in lines) is srvkey, serving
        assert (f"{server} hash-key addr-port" in lines) is hash_key, serving
    b.hash_type = "map-based"  # hash-key only places servers on a consistent-hash ring
    assert server in render_backend(b, haproxy_version=(3, 2))


def test_cli_render_for_a_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], haproxy_bin: HAProxyBinary
) -> None:
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(json_format.MessageToDict(realistic())))
    base = ["render", "--snapshot", str(path), "--pod-name", "haproxy-b"]
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert " srvkey addr " in out and "hash-key" not in out  # the oldest supported, 2.6
    assert cli.main([*base, "--haproxy-version", "3.0.11"]) == 0
    assert "  server SRV_1 10.244.2.1:8080 id 1 enabled hash-key addr-port" in (
        capsys.readouterr().out
    )
    assert cli.main([*base, "--haproxy-bin", haproxy_bin.path]) == 0
    serving = haproxy_bin.version_tuple[:2]
    expected = render(realistic(), RenderOptions("haproxy-b", haproxy_version=serving))
    assert capsys.readouterr().out == expected
    assert cli.main([*base, "--haproxy-version", "three"]) == 1
    assert "MAJOR.MINOR" in capsys.readouterr().err


def test_cli_render_writes_the_route_maps_the_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], haproxy_bin: HAProxyBinary
) -> None:
    """The demo routes HTTP by host through map files: with --maps-dir the printed config
    names them there and they are written, so `haproxy -c` checks it on its own; without
    it they are only named (under /etc/haproxy/maps) and the check cannot open them."""
    from controlplane import cli as controlplane_cli
    from tests.helpers.fleet import DEMO, WORKLOAD

    assert (
        controlplane_cli.main(["compute", "--source", f"files:{DEMO}", "--workload", WORKLOAD]) == 0
    )
    path = tmp_path / "snap.json"
    path.write_text(capsys.readouterr().out)
    maps = tmp_path / "maps"
    base = ["render", "--snapshot", str(path), "--pod-name", "haproxy-7x2kq"]
    assert cli.main([*base, "--haproxy-bin", haproxy_bin.path, "--maps-dir", str(maps)]) == 0
    config = tmp_path / "haproxy.cfg"
    config.write_text(capsys.readouterr().out)
    written = sorted(p.name for p in maps.iterdir())
    assert written and all(name.startswith("fe_18080.") for name in written)
    assert all(f"{maps}/{name}" in config.read_text() for name in written)
    check = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert cli.main(base) == 0
    assert "/etc/haproxy/maps/fe_18080." in capsys.readouterr().out
    assert cli.main([*base, "--maps-dir", "/tmp/bad dir"]) == 1
    assert "invalid maps directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value"),
    [("mode", "quic"), ("balance", "random-ish"), ("hash_type", "rendezvous"), ("expire", 0)],
)
def test_a_value_the_agent_does_not_take_refuses_that_backend_alone(
    field: str, value: object
) -> None:
    """A number out of range or a plain word this agent does not know (a newer control
    plane's) names its backend: the applier sets it aside and renders the rest."""
    b = backend("tenant-b_web_80", [("10.244.0.32", 8888)])
    if field == "expire":
        b.persistence.expire_ms = 0
    else:
        setattr(b, field, value)
    with pytest.raises(BackendRefused) as refused:
        render_backend(b)
    assert refused.value.backend == "tenant-b_web_80"


@pytest.mark.parametrize("field", ["mode", "balance", "hash_type", "balance_argument"])
def test_a_value_that_could_carry_config_text_is_no_backends_refusal(field: str) -> None:
    """A protocol violation (a smuggled line, a path) NACKs the version, as before."""
    b = backend("tenant-b_web_80", [("10.244.0.32", 8888)], balance="roundrobin")
    setattr(b, field, "x\n  http-request deny")
    with pytest.raises(RenderError) as refused:
        render_backend(b)
    assert not isinstance(refused.value, BackendRefused)
