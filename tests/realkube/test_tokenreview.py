"""TokenReview on the real API server, asked with the control plane's own token under the
shipped ClusterRole (`tokenreviews: create`), of real TokenRequest tokens: an agent's
pod-bound token of deploy/'s `haproxy-system/haproxy` ServiceAccount with the audience the
control plane expects (`peerplane`, as the DaemonSet's projected volume asks) is accepted
and names its pod; the same ServiceAccount's token for another audience, another
ServiceAccount's token and a forged one are refused, by the reviewer and by `serve
--authenticate-agents` on the Stream and inspection calls. The fake-server version:
tests/kube/test_tokenreview.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.kube.tokenreview import KubeTokenReviewer
from controlplane.server.auth import DEFAULT_AUDIENCE, Denied
from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_serve import (
    CONTROLPLANE_NS,
    HAPROXY_SELECTOR,
    free_lease,
    own_namespace,
    serve_args,
)
from tests.helpers.server_harness import bearer, run, stream_status
from tests.helpers.server_process import ServeProcess

AGENT_SA = "haproxy"


def pod_token(cluster: RealCluster, pod: Any, audience: str = DEFAULT_AUDIENCE) -> str:
    """A TokenRequest token of the agents' ServiceAccount bound to `pod`, as the kubelet
    projects it into the pod (deploy/base/haproxy.yaml)."""
    return cluster.kubectl(
        "create",
        "token",
        AGENT_SA,
        "-n",
        CONTROLPLANE_NS,
        f"--audience={audience}",
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod.metadata.name}",
        f"--bound-object-uid={pod.metadata.uid}",
        "--duration=1h",
    ).strip()


def forged(token: str) -> str:
    """The token with its signature's first character changed."""
    head, _, signature = token.rpartition(".")
    return f"{head}.{'B' if signature[0] != 'B' else 'C'}{signature[1:]}"


def test_the_reviewer_accepts_an_agents_pod_token_and_refuses_the_rest(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    reviewer = KubeTokenReviewer(installed.api_client(controlplane_kubeconfig))
    pod = installed.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR)[0]
    token = pod_token(installed, pod)
    identity = reviewer.review(token, [DEFAULT_AUDIENCE])
    assert identity.username == f"system:serviceaccount:{CONTROLPLANE_NS}:{AGENT_SA}"
    assert identity.pod == f"{CONTROLPLANE_NS}/{pod.metadata.name}"
    assert identity.pod_uid == pod.metadata.uid

    refused = {
        "another audience": pod_token(installed, pod, audience="not-peerplane"),
        "the API server's audience": installed.token(CONTROLPLANE_NS, AGENT_SA),
        "forged": forged(token),
    }
    for why, bad in refused.items():
        with pytest.raises(Denied) as denied:
            reviewer.review(bad, [DEFAULT_AUDIENCE])
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED, why
        assert "invalid bearer token" in denied.value.message, why
        if why != "forged":  # the server names the audiences (the fake now does too)
            assert 'is invalid for the target audiences ["peerplane"]' in denied.value.message

    with own_namespace(installed, "rk-token") as ns:  # valid, but nobody's agent
        other = installed.token(ns, "default", audience=DEFAULT_AUDIENCE)
        someone = reviewer.review(other, [DEFAULT_AUDIENCE])
    assert (someone.namespace, someone.service_account, someone.pod) == (ns, "default", "")


def list_workloads(address: str, token: str) -> grpc.StatusCode:
    """The status ListWorkloads (an inspection call) answers with `token`."""
    with grpc.insecure_channel(address) as channel:
        stub = peerplane_pb2_grpc.PeerPlaneStub(channel)
        try:
            stub.ListWorkloads(pb.ListWorkloadsRequest(), metadata=bearer(token), timeout=10)
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            return code
    return grpc.StatusCode.OK


def test_serve_admits_an_agent_by_its_pod_token_and_refuses_the_rest(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    free_lease(installed)
    first, second = installed.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR)[:2]
    token = pod_token(installed, first)
    args = serve_args(
        controlplane_kubeconfig, "--authenticate-agents", f"--token-audience={DEFAULT_AUDIENCE}"
    )
    with own_namespace(installed, "rk-token") as ns, ServeProcess(*args) as serve:
        serve.wait_for(re.compile(r"published "), timeout=30)
        other = installed.token(ns, "default", audience=DEFAULT_AUDIENCE)
        elsewhere = pod_token(installed, first, audience="not-peerplane")

        async def streams() -> dict[str, grpc.StatusCode | str]:
            a, b = first.metadata.name, second.metadata.name
            return {
                "own pod": await stream_status(serve.address, a, token),
                "another pod": await stream_status(serve.address, b, token),
                "another ServiceAccount": await stream_status(serve.address, a, other),
                "another audience": await stream_status(serve.address, a, elsewhere),
                "forged": await stream_status(serve.address, a, forged(token)),
                "no token": await stream_status(serve.address, a, ""),
            }

        denied = grpc.StatusCode.PERMISSION_DENIED
        assert run(streams()) == {
            "own pod": "snapshot",
            "another pod": denied,
            "another ServiceAccount": denied,
            "another audience": denied,
            "forged": denied,
            "no token": grpc.StatusCode.UNAUTHENTICATED,
        }
        line = serve.wait_for(re.compile(r".*cannot speak for pod.*")).group(0)
        assert f"{first.metadata.name} cannot speak for pod" in line
        serve.wait_for(re.compile(rf"token of system:serviceaccount:{ns}:default is not bound"))
        # Inspection: any valid token but an agent's own.
        assert list_workloads(serve.address, other) == grpc.StatusCode.OK
        assert list_workloads(serve.address, token) == denied
        assert list_workloads(serve.address, elsewhere) == denied
        assert serve.terminate() == 0
