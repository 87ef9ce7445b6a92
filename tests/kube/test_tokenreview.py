"""TokenReview against the fake API server: the reviewer, and `controlplane serve
--authenticate-agents` accepting an agent's own pod token and refusing the rest."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from controlplane.kube.tokenreview import KubeTokenReviewer
from controlplane.server.auth import Denied
from tests.helpers.server_harness import run, stream_status
from tests.helpers.server_process import ROOT, ServeProcess
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, write_kubeconfig

DEMO = ROOT / "deploy" / "examples" / "demo"
SA = "system:serviceaccount:haproxy-system:haproxy"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    server.add_token("tok-a", SA, pod=("haproxy-7x2kq", "uid-a"))
    server.add_token("tok-other-audience", SA, pod=("haproxy-7x2kq", "uid-a"), audiences=("x",))
    yield server
    server.stop()


def test_reviewer_reads_the_pod_identity_and_checks_the_audience(api: FakeKubeAPI) -> None:
    reviewer = KubeTokenReviewer(api_client(api.url))
    identity = reviewer.review("tok-a", ["peerplane"])
    assert identity.pod == "haproxy-system/haproxy-7x2kq"
    assert (identity.service_account, identity.pod_uid) == ("haproxy", "uid-a")
    body = api.token_reviews[-1]
    assert body["spec"] == {"token": "tok-a", "audiences": ["peerplane"]}
    for token in ("forged", "tok-other-audience"):
        with pytest.raises(Denied) as denied:
            reviewer.review(token, ["peerplane"])
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    api.fail_next("TokenReview", 500)
    with pytest.raises(Exception) as failure:  # the API server failed: not a denial
        reviewer.review("tok-a", ["peerplane"])
    assert not isinstance(failure.value, Denied)


def test_the_fake_answers_as_the_real_server_does(api: FakeKubeAPI) -> None:
    """The fake took a review naming no audience as one for any audience (a real server
    reviews it for its own, and refuses a `peerplane` token), said "token audiences are
    invalid" where a real server names them, and left groups empty
    (tests/realkube/test_tokenreview.py saw the real answers)."""
    authentication = client.AuthenticationV1Api(api_client(api.url))

    def status(token: str, audiences: list[str] | None) -> dict[str, Any]:
        body = {"spec": {"token": token, "audiences": audiences}}
        reply = authentication.create_token_review(body, _preload_content=False)
        found: dict[str, Any] = json.loads(reply.data)["status"]
        return found

    assert status("tok-a", None) == {
        "user": {},
        "error": '[invalid bearer token, token audiences ["peerplane"] is invalid for the '
        'target audiences ["https://kubernetes.default.svc.cluster.local"]]',
    }
    assert status("tok-other-audience", ["peerplane"])["error"] == (
        '[invalid bearer token, token audiences ["x"] is invalid for the target audiences '
        '["peerplane"]]'
    )
    assert status("forged", ["peerplane"]) == {"user": {}, "error": "invalid bearer token"}
    accepted = status("tok-a", ["peerplane"])
    assert accepted["audiences"] == ["peerplane"]
    assert accepted["user"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:haproxy-system",
        "system:authenticated",
    ]


def test_serve_authenticates_agents_by_token_review(api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(api.url, tmp_path / "kubeconfig")
    args = ("--source", f"files:{DEMO}", "--authenticate-agents", f"--kubeconfig={kubeconfig}")
    with ServeProcess(*args) as serve:
        serve.wait_for(re.compile(r"published "))

        async def body() -> None:
            assert await stream_status(serve.address, "haproxy-7x2kq", "tok-a") == "snapshot"
            denied = await stream_status(serve.address, "haproxy-m4r9t", "tok-a")
            assert denied == grpc.StatusCode.PERMISSION_DENIED
            missing = await stream_status(serve.address, "haproxy-7x2kq", "")
            assert missing == grpc.StatusCode.UNAUTHENTICATED
            await asyncio.sleep(0)

        run(body())
        line = serve.wait_for(re.compile(r"stream refused \(PERMISSION_DENIED\).*")).group(0)
        assert (
            "haproxy-system/haproxy-7x2kq cannot speak for pod haproxy-system/haproxy-m4r9t" in line
        )
        assert serve.terminate() == 0
