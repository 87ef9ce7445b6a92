"""TokenReview against the fake API server: the reviewer, and `controlplane serve
--authenticate-agents` accepting an agent's own pod token and refusing the rest."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controlplane.kube.tokenreview import KubeTokenReviewer
from controlplane.server.auth import Denied
from tests.helpers.server_harness import Agent, run
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


async def stream_status(address: str, pod: str, token: str) -> grpc.StatusCode | str:
    """What the server answers a stream opening with `token` and a Hello for `pod`. A
    token is refused from the metadata, before the Hello is read; when the Hello's write
    crosses that refusal, gRPC's client reports INTERNAL ("execute_batch") instead of
    the server's status (seen once in CI), so that one race is tried again, twice."""
    for _ in range(3):
        async with grpc.aio.insecure_channel(address) as channel:
            agent = Agent(channel, pod, token=token)
            try:
                await agent.hello()
                message = await agent.recv()
            except grpc.aio.AioRpcError as err:
                crossed = "execute_batch" in (err.debug_error_string() or "")
                if err.code() == grpc.StatusCode.INTERNAL and crossed:
                    continue
                code: grpc.StatusCode = err.code()
                return code
            return str(message.WhichOneof("message"))
    raise AssertionError("the Hello crossed the server's answer three times")


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
