"""`make demo` runs: the demo script with --once performs the failover run and exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.fleet import haproxy_binary

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.haproxy  # the demo's one HAProxy (on PATH): `make demo` needs only one version
@pytest.mark.skipif(haproxy_binary() is None, reason="needs the haproxy binary")
def test_demo_runs_the_failover_and_stops_everything(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "deploy/examples/run_demo.py"),
            "--once",
            "--workdir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "haproxy-system/DaemonSet/haproxy" in out  # ListWorkloads through grpcurl
    assert "peers localinstance" in out  # the rendered config
    assert "localpeer haproxy-7x2kq" in out
    assert "persistence survived" in out
    # Clients wait for /readyz as a load balancer would: no request before both are ready
    # (docs/operations.md, "Readiness where traffic is decided").
    first_request = out.index("client 127.0.9.1 -> HAProxy A")
    for label, address in (("A", "127.0.1.1"), ("B", "127.0.1.2")):
        line = f"HAProxy {label} ready: GET http://{address}:19101/readyz -> 200 ready"
        assert 0 <= out.find(line) < first_request, out[:first_request][-2000:]
    restarted = out.index("restarting agent A")
    assert out.find("HAProxy A ready: GET", restarted) > restarted  # ready again after it
    assert "stopped." in out
    # Nothing left behind: every HAProxy the agents started is gone.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(tmp_path) not in ps.stdout
