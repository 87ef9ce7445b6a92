"""`make demo` runs: the demo script with --once shows the routes of routes.yaml and the
HTTPS ones of demo-https/ (a certificate it made at start, verified against its CA),
performs the failover run and exits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cluster_serve import forbidden
from tests.helpers.fleet import haproxy_binary

REPO = Path(__file__).resolve().parents[2]
# The demo's route lines (routes.yaml) and the Service whose pods must answer them.
ROUTED = (
    ("HTTPRoute store, PathPrefix /cart -> shop", r"shop-\d"),
    ("HTTPRoute store, /api + header x-canary: always -> shop", r"shop-\d"),
    (
        "HTTPRoute store, Exact /old-catalog -> redirect",
        r"301 Location: http://store\.demo\.example\.com:18080/api",
    ),
    ("Ingress catalog, Prefix /catalog -> catalog", r"catalog-\d"),
    ("Ingress catalog, Prefix / -> shop", r"shop-\d"),
)
ROUTE_CLIENTS = ("127.0.9.11", "127.0.9.12", "127.0.9.13")
HTTPS_CLIENTS = ("127.0.9.21", "127.0.9.22", "127.0.9.23")
HTTPS_ROUTED = (
    "HTTPS Gateway listener, HTTPRoute secure-store -> shop",
    "HTTPS Ingress secure-shop (spec.tls) -> shop",
)


def route_answers(out: str, what: str, scheme: str = "http") -> list[str]:
    """The answers the demo printed for one route: HAProxy A's, then B's."""
    start = out.index(f"{what}: GET {scheme}://")
    lines = out[start:].splitlines()[1:3]
    prefixes = ("  HAProxy A (127.0.1.1) -> ", "  HAProxy B (127.0.1.2) -> ")
    assert [line[: len(p)] for line, p in zip(lines, prefixes, strict=True)] == list(prefixes)
    return [line[len(p) :] for line, p in zip(lines, prefixes, strict=True)]


@pytest.mark.haproxy  # the demo's one HAProxy (on PATH): `make demo` needs only one version
@pytest.mark.skipif(haproxy_binary() is None, reason="needs the haproxy binary")
@pytest.mark.parametrize(
    "kube",
    [
        "folder",
        pytest.param(
            "real",
            marks=[
                pytest.mark.realkube,
                pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace: root"),
            ],
        ),
    ],
)
def test_demo_runs_the_failover_and_stops_everything(tmp_path: Path, kube: str) -> None:
    """`make demo` and `make demo KUBE=real` (a real API server, tests/cluster/up, with
    the shipped RBAC and two control-plane replicas on a Lease): the same answers."""
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "deploy/examples/run_demo.py"),
            "--once",
            "--workdir",
            str(tmp_path),
            "--kube",
            kube,
        ],
        capture_output=True,
        text=True,
        timeout=300,
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
    first_request = out.index(f"{ROUTED[0][0]}: GET http://")  # the routes come first
    assert first_request < out.index("client 127.0.9.1 -> HAProxy A")
    for label, address in (("A", "127.0.1.1"), ("B", "127.0.1.2")):
        line = f"HAProxy {label} ready: GET http://{address}:19101/readyz -> 200 ready"
        assert 0 <= out.find(line) < first_request, out[:first_request][-2000:]
    # Both HAProxy instances route the HTTPRoute and the Ingress to the Services they name.
    for what, answer in ROUTED:
        for got in route_answers(out, what):
            assert re.fullmatch(answer, got), f"{what}: {got!r}"
    # Over HTTPS: both hosts through both instances, shop answering with the certificate of
    # the Secret the demo made (its serial printed at start), checked against the demo CA.
    made = re.search(
        r"HTTPS: Secret default/demo-tls \(([^)]+)\) made at start, certificate "
        r"serial ([0-9a-f]+) .* signed by the demo CA (\S+)\n",
        out,
    )
    assert made, out[:3000]
    secret_file, serial, ca_file = made.groups()
    assert ca_file.startswith(str(tmp_path))
    if kube == "folder":
        assert secret_file.startswith(str(tmp_path))
    else:
        assert secret_file == "applied to the cluster"
        secret_file = "Secret default/demo-tls"
        logs = [tmp_path / "controlplane.log", tmp_path / "controlplane-2.log"]
        denied = [line for log in logs for line in forbidden(log.read_text().splitlines())]
        assert not denied, denied  # the shipped RBAC, a real token
        assert not list((tmp_path / "cluster").glob("pids"))  # the cluster is down
    for what in HTTPS_ROUTED:
        for got in route_answers(out, what, "https"):
            assert re.fullmatch(rf"shop-\d, certificate serial {serial} \(verified\)", got), got
    for host in ("secure.demo.example.com", "secure.example.com"):
        curl = f"curl --cacert {ca_file} --resolve {host}:18443:127.0.1.1 https://{host}:18443/"
        assert curl in out
    # The Secret renewed in its file: its new serial served by both, no reload.
    verb = "rewriting" if kube == "folder" else "applying"
    renewed = re.search(rf"{verb} {re.escape(secret_file)}: serial ([0-9a-f]+)\n", out)
    assert renewed and renewed.group(1) != serial
    changed = "the file changed" if kube == "folder" else "the API server took the Secret"
    assert re.search(rf"served by both HAProxy instances \d+ ms after {changed}\n", out)
    assert "HAProxy reloads: 0 (the runtime API" in out
    assert "PRIVATE KEY" not in out and "BEGIN" not in out  # no PEM shown, ever
    assert "UNEXPECTED" not in out
    split = re.search(
        r"weights catalog 90 shop 10: 20 requests via A -> catalog (\d+), shop (\d+)", out
    )
    assert split and int(split.group(1)) + int(split.group(2)) == 20 and int(split.group(1)) > 0
    # Clients pinned through the HTTPRoute on A are answered by the same pod through B
    # once A is stopped.
    stopped = out.index("stopping agent A")
    # Browsers holding the session cookie A set (a session cookie) keep their pod through B
    # (folder mode: sessions.yaml needs the experimental channel).
    if kube == "folder":
        held = re.findall(
            r"browser (\d) -> HAProxy A -> http://sessions\.demo\.example\.com/ -> "
            r"(catalog-\d), Set-Cookie: catalog-session=(SRV_\d+\S*); .*"
            r"\(a session cookie: no Expires, no Max-Age\)\n",
            out[:stopped],
        )
        assert len(held) == 3, out[:stopped][-3000:]
        for browser, pod, value in held:
            kept = f"browser {browser} -> HAProxy B, Cookie catalog-session={value} -> {pod}  "
            assert kept + "(the same pod: " in out[stopped:], out[stopped:][-3000:]
    for client in ROUTE_CLIENTS:
        via = f"client {client} -> HAProxy {{}} -> HTTPRoute store.demo.example.com/cart -> "
        before = re.search(re.escape(via.format("A")) + r"(shop-\d)\n", out[:stopped])
        after = re.search(re.escape(via.format("B")) + r"(\S+)  (.*)\n", out[stopped:])
        assert before and after, out[-3000:]
        assert after.group(1) == before.group(1), f"{client} moved"
        assert after.group(2) == "(the same pod: pinned through the route)"
    for client in HTTPS_CLIENTS:
        via = f"client {client} -> HAProxy {{}} -> HTTPS secure.demo.example.com -> "
        before = re.search(re.escape(via.format("A")) + r"(shop-\d)\n", out[:stopped])
        after = re.search(re.escape(via.format("B")) + r"(\S+)  (.*)\n", out[stopped:])
        assert before and after, out[-3000:]
        assert after.group(1) == before.group(1), f"{client} moved"
        assert after.group(2) == "(the same pod: pinned over HTTPS)"
    restarted = out.index("restarting agent A")
    assert out.find("HAProxy A ready: GET", restarted) > restarted  # ready again after it
    assert "stopped." in out
    # Nothing left behind: every HAProxy the agents started is gone.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert str(tmp_path) not in ps.stdout
