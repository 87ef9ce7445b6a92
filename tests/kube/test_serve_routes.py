"""`controlplane serve --source kubernetes` and the route model's Kubernetes side: a
cluster without the Gateway API CRDs is served (said once), and the Lease holder writes
the route objects' status."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess
from tests.kube.test_serve import serve_args
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import ingress, ingress_class, wait_until
from tests.kubeapi.server import GATEWAY_GROUP

ABSENT = re.compile(r"API group gateway\.networking\.k8s\.io is not served \(404\)")


def test_without_the_gateway_api_crds_serve_is_ready_and_says_so_once(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    api.remove_group(GATEWAY_GROUP)
    api.apply(ingress_class(default=True))
    api.apply(ingress())
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        assert wait_until(lambda: health(serve.address) == "SERVING", 10)
        serve.wait_for(ABSENT)
        assert serve.terminate() == 0
        serve.wait_for(re.compile("stopped"))
        assert sum(1 for line in serve.lines if ABSENT.search(line)) == 1
        assert not [line for line in serve.lines if "informer" in line and "retrying" in line]
