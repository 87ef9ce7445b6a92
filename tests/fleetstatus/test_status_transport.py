"""`controlplane status` over the transports the agent uses: mTLS to a real `controlplane
serve` (the demo's manifests, no agent connected), and clear refusals for a wrong CA, a
missing client certificate, an unreadable token file and a bad flag."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.certs import Certs, make_certs
from tests.helpers.server_process import BIN, ROOT, ServeProcess

DEMO = ROOT / "deploy" / "examples" / "demo"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(BIN / "controlplane"), "status", "--timeout", "5", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)


def test_status_over_mtls_and_its_refusals(certs: Certs, tmp_path: Path) -> None:
    args = ("--source", f"files:{DEMO}", "--tls-cert", str(certs.server_cert))
    args += ("--tls-key", str(certs.server_key), "--client-ca", str(certs.ca))
    with ServeProcess(*args, insecure=False) as serve:
        serve.wait_for(re.compile(r"published "))
        target = ("--control-plane", serve.address)
        client = ("--client-cert", str(certs.client_cert), "--client-key", str(certs.client_key))
        ok = _status(*target, "--ca", str(certs.ca), *client, "--output", "json")
        assert ok.returncode == 0, ok.stderr
        report = json.loads(ok.stdout)
        assert report["ok"] is True and report["agents"] == []
        assert [w["workload"] for w in report["workloads"]] == [WORKLOAD]
        text = _status(*target, "--ca", str(certs.ca), *client, "--workload", WORKLOAD)
        assert text.returncode == 0 and "(no agent connected)" in text.stdout
        assert text.stdout.endswith("OK\n")

        wrong_ca = _status(*target, "--ca", str(certs.other_ca), *client)
        assert wrong_ca.returncode == 2 and "UNAVAILABLE" in wrong_ca.stderr
        no_cert = _status(*target, "--ca", str(certs.ca))
        assert no_cert.returncode == 2 and "ListWorkloads" in no_cert.stderr
        token = tmp_path / "missing-token"
        no_token = _status(*target, "--ca", str(certs.ca), *client, "--token-file", str(token))
        assert no_token.returncode == 2 and f"cannot read token file {token}" in no_token.stderr
        unknown = _status(*target, "--ca", str(certs.ca), *client, "--workload", "x/Deployment/y")
        assert unknown.returncode == 2 and "not known" in unknown.stderr
        assert WORKLOAD in unknown.stderr
        lonely = _status(*target, "--ca", str(certs.ca), *client, "--diff", "1", "2")
        assert lonely.returncode == 2 and "--diff needs --workload" in lonely.stderr
    bad = _status("--insecure", "--stale-after", "nan")
    assert bad.returncode == 2 and "--stale-after" in bad.stderr
