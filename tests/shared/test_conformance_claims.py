"""The extended features peerplane claims are one list: the committed conformance report's
`supportedFeatures`, the `--supported-features` tests/conformance/run passes the suite, the
README and the route reference (docs/annotations.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "conformance" / "reports"
CORE_FEATURES = {"Gateway", "HTTPRoute", "GRPCRoute", "ReferenceGrant"}
PROFILES = ["GATEWAY-GRPC", "GATEWAY-HTTP"]
CLAIM_LINE = re.compile(r"Supported extended features \(the report's `supportedFeatures`\): (.*)")


def _profiles() -> list[dict[str, Any]]:
    """The profiles of the latest committed report: GATEWAY-HTTP and GATEWAY-GRPC."""
    (report,) = sorted(REPORTS.glob("v*/peerplane.yaml"))[-1:]
    profiles: list[dict[str, Any]] = yaml.safe_load(report.read_text())["profiles"]
    assert sorted(p["name"] for p in profiles) == PROFILES
    return profiles


def _reported() -> list[str]:
    """The extended features of every profile (a feature both profiles test, such as
    GatewayPort8080, is one claim)."""
    return sorted({f for p in _profiles() for f in p["extended"]["supportedFeatures"]})


def _claimed_in(path: Path) -> list[str]:
    (found,) = CLAIM_LINE.findall(path.read_text())
    return sorted(re.findall(r"`([A-Za-z0-9]+)`", found))


def _passed_to_the_suite() -> list[str]:
    text = (REPO / "tests" / "conformance" / "run").read_text()
    block = text.split("SUPPORTED_FEATURES = ", 1)[1].split(")", 1)[0]
    return sorted(set(re.findall(r'"([A-Za-z0-9]+)"', block)) - CORE_FEATURES)


def test_the_docs_claim_what_the_report_says() -> None:
    reported = _reported()
    assert reported, "the report claims no extended feature"
    assert _claimed_in(REPO / "README.md") == reported
    assert _claimed_in(REPO / "docs" / "annotations.md") == reported


def test_the_suite_is_run_with_the_claimed_features() -> None:
    assert _passed_to_the_suite() == _reported()


def test_the_report_passed_every_core_and_claimed_test() -> None:
    for profile in _profiles():
        for part in ("core", "extended"):
            assert profile[part]["result"] == "success", (profile["name"], profile[part])
            assert profile[part]["statistics"]["Failed"] == 0
            assert profile[part]["statistics"]["Skipped"] == 0
