"""Rejections as Events on the real API server, written with the control plane's own
token under the shipped ClusterRole (`events: create, patch`): `serve` puts a Warning
Event on a Service whose annotation it rejects, in that Service's namespace, with its uid
(so `kubectl describe` lists it); the recorder's later reports patch that Event's count,
and one that expired is created anew. The fake-server version: tests/kube/test_events.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.kube.events import COMPONENT, EventRecorder
from controlplane.snapshot import RejectedInput
from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_serve import (
    exposed_service,
    forbidden,
    free_lease,
    own_namespace,
    serve_args,
)
from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until
from tests.kubeapi.objects import MISPLACED, misplaced_event


def events_of(cluster: RealCluster, namespace: str, name: str) -> list[client.CoreV1Event]:
    core = client.CoreV1Api(cluster.api_client())
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
    return list(found.items)


def test_a_rejected_annotation_becomes_a_warning_event_on_the_service(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    free_lease(installed)
    with own_namespace(installed, "rk-events") as ns:
        installed.apply(exposed_service(ns, "shop", ("10.0.3.1",), load_balance="bogus"))
        with ServeProcess(*serve_args(controlplane_kubeconfig)) as serve:
            wait_until(lambda: health(serve.address) == "SERVING", 30, message=lambda: serve.lines)
            wait_until(
                lambda: bool(events_of(installed, ns, "shop")), 15, message=lambda: serve.lines
            )
            (event,) = events_of(installed, ns, "shop")
            assert serve.terminate() == 0
        service = client.CoreV1Api(installed.api_client()).read_namespaced_service("shop", ns)
        assert (event.type, event.reason) == ("Warning", "InvalidAnnotation")
        assert "haproxy.org/load-balance='bogus' rejected" in event.message
        involved = event.involved_object
        assert (involved.kind, involved.api_version) == ("Service", "v1")
        assert (involved.namespace, involved.uid) == (ns, service.metadata.uid)
        assert event.source.component == COMPONENT and event.count == 1
    assert not forbidden(serve.lines)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_rejection_patches_its_event_and_an_expired_one_is_created_again(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    clock = Clock()
    recorder = EventRecorder(
        installed.api_client(controlplane_kubeconfig), interval=600.0, host="rk", clock=clock
    )
    try:
        with own_namespace(installed, "rk-events") as ns:
            installed.apply(exposed_service(ns, "shop", ("10.0.3.1",)))
            bad = RejectedInput("Service", ns, "shop", "haproxy.org/load-balance", "rr", "unknown")
            assert recorder.record([bad]) == 1 and recorder.flush()
            (first,) = events_of(installed, ns, "shop")
            clock.now += 10
            assert recorder.record([bad]) == 0  # within the interval: nothing sent
            clock.now += 600
            assert recorder.record([bad]) == 1 and recorder.flush()
            (patched,) = events_of(installed, ns, "shop")
            assert patched.metadata.name == first.metadata.name and patched.count == 2

            core = client.CoreV1Api(installed.api_client())
            core.delete_namespaced_event(first.metadata.name, ns)  # as if it expired
            clock.now += 600
            assert recorder.record([bad]) == 1 and recorder.flush()
            (again,) = events_of(installed, ns, "shop")
            assert again.metadata.name != first.metadata.name and again.count == 1
            assert again.involved_object.uid
    finally:
        recorder.close()


def test_an_event_about_an_object_of_another_namespace_is_refused(
    installed: RealCluster,
) -> None:
    """What the fake server now refuses too (tests/kube/test_events.py), in these words."""
    core = client.CoreV1Api(installed.api_client())
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_event("default", misplaced_event())
    assert refused.value.status == 422
    assert json.loads(refused.value.body)["message"] == MISPLACED
