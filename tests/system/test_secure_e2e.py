"""The deployed combination end to end, as processes: `controlplane serve` with TLS,
mTLS and TokenReview (fake API server) and `nodeagent run` with --ca, a client
certificate and a token file that starts invalid and is then rotated; the agent
applies to a real HAProxy and its metrics and JSON log say so."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.certs import make_certs
from tests.helpers.fleet import DEMO, free_port
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.server_process import ROOT, ServeProcess
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import write_kubeconfig

pytestmark = pytest.mark.haproxy
OCTET = 74
POD = "haproxy-7x2kq"
SA = "system:serviceaccount:haproxy-system:haproxy"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI() as server:
        server.add_token("tok-a", SA, pod=(POD, "uid-a"))
        yield server


def manifests(directory: Path) -> Path:
    shutil.copytree(DEMO, directory)
    for path in directory.glob("*.yaml"):
        path.write_text(re.sub(r"\b127\.0\.(\d+\.\d+)", rf"127.{OCTET}.\1", path.read_text()))
    return directory


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    return {
        line.rpartition(" ")[0]: float(line.rpartition(" ")[2])
        for line in lines
        if line and not line.startswith("#")
    }


def test_tls_mtls_token_rotation_end_to_end(
    api: FakeKubeAPI, tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    certs = make_certs(tmp_path / "certs")
    kubeconfig = write_kubeconfig(api.url, tmp_path / "kubeconfig")
    token = tmp_path / "token"
    token.write_text("tok-stale\n")
    serve_args = (
        f"--source=files:{manifests(tmp_path / 'manifests')}",
        f"--tls-cert={certs.server_cert}",
        f"--tls-key={certs.server_key}",
        f"--client-ca={certs.ca}",
        "--authenticate-agents",
        f"--kubeconfig={kubeconfig}",
    )
    metrics_port = free_port()
    work = tmp_path / "agent"
    log = tmp_path / "agent.log"
    with ServeProcess(*serve_args, insecure=False) as serve, log.open("wb") as out:
        argv = [sys.executable, "-m", "nodeagent", "run", "--control-plane", serve.address]
        argv += ["--ca", str(certs.ca), "--client-cert", str(certs.client_cert)]
        argv += ["--client-key", str(certs.client_key), "--token-file", str(token)]
        argv += ["--pod-namespace", "haproxy-system", "--pod-name", POD]
        argv += ["--config", str(work / "haproxy.cfg"), "--state-dir", str(work / "state")]
        argv += ["--bind-address", f"127.{OCTET}.1.1", "--manage-haproxy"]
        argv += ["--haproxy-bin", haproxy_bin.path, "--log-format", "json"]
        argv += ["--metrics-port", str(metrics_port)]
        agent = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            wait_until(lambda: "refused this agent" in log.read_text(), 20, "a refusal")
            token.write_text("tok-a\n")  # rotated by the kubelet
            wait_until(
                lambda: scrape(metrics_port).get("nodeagent_acks_sent_total") == 1, 30, "ACK"
            )
            figures = scrape(metrics_port)
            serve.wait_for(re.compile(rf"agent haproxy-system/{POD} acked"))
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(15)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait(5)
    assert agent.returncode == 0
    assert figures["nodeagent_connected"] == 1 and figures["nodeagent_reloads_total"] == 1
    assert figures["nodeagent_applied_version"] >= 1
    events = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    refused = [e for e in events if "refused this agent" in e["message"]]
    assert refused and "PERMISSION_DENIED" in refused[0]["message"]
    acks = [e for e in events if e.get("event") == "ack"]
    assert acks and acks[0]["workload"] == "haproxy-system/DaemonSet/haproxy"
    assert acks[0]["path"] == "reload"
