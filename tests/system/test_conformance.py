"""The upstream Gateway API conformance suite (tests/conformance/run) on every change: the
GATEWAY-HTTP and GATEWAY-GRPC profiles' core tests and the extended features peerplane
claims, on a real
cluster with real HAProxy, the suite's own verdicts read back from its ConformanceReport.

`make conformance` runs the same and commits the report (conformance/reports/); this test
runs it with CI_SKIPPED left out (each with its reason below, the same list the report's
README gives; none now). Root (network namespaces), Go for the first build
(tests/conformance/build).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.fleet import REPO, haproxy_binary

RUN = REPO / "tests" / "conformance" / "run"
# Tests CI leaves out, and why (conformance/README.md lists the same): none.
CI_SKIPPED: dict[str, str] = {}

pytestmark = [
    pytest.mark.realkube,
    pytest.mark.haproxy,
    pytest.mark.skipif(os.geteuid() != 0, reason="root: network namespaces for the pods"),
    pytest.mark.skipif(haproxy_binary() is None, reason="no haproxy installed"),
]


def test_gateway_http_and_grpc_profiles_pass(tmp_path: Path) -> None:
    report = tmp_path / "peerplane.yaml"
    done = subprocess.run(
        [
            sys.executable,
            str(RUN),
            f"--report={report}",
            f"--workdir={tmp_path / 'run'}",
            *([f"--skip-tests={','.join(CI_SKIPPED)}"] if CI_SKIPPED else []),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert report.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    profiles = yaml.safe_load(report.read_text())["profiles"]
    assert sorted(p["name"] for p in profiles) == ["GATEWAY-GRPC", "GATEWAY-HTTP"]
    for profile in profiles:
        for part in ("core", "extended"):
            found = profile.get(part)
            if found is None:
                continue
            assert found.get("failedTests", []) == [], (part, done.stdout[-4000:])
            assert found["result"] in ("success", "partial"), (part, found)
            assert set(found.get("skippedTests", [])) <= set(CI_SKIPPED), found
    assert done.returncode == 0, done.stdout[-4000:]
