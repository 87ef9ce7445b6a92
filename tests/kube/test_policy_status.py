"""SourceIPPersistencePolicy against the fake API server: the Kubernetes source reads it
(a cluster without peerplane's CRD: none, said once at INFO, the rest served), and its
`status.ancestors` is written to its `/status` by the route status writer, other
controllers' ancestors kept."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.kube.route_status import GATEWAY_CONTROLLER, RouteStatusWriter
from controlplane.kube.source import KubernetesSource
from controlplane.routes.status import route_statuses
from controlplane.source.kinds import PEERPLANE_POLICIES
from tests.helpers.waiting import wait_until
from tests.kube.test_source import Changes
from tests.kube.test_source_routes import fast
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, service, source_ip_persistence_policy
from tests.kubeapi.server import POLICY_GROUP

Obj = dict[str, Any]


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI(bookmark_interval=0.2).start()
    for obj in (
        service("shop"),
        source_ip_persistence_policy("sticky", tableSize="64k", expire="10m"),
        source_ip_persistence_policy("lost", service_name="nosuch"),
    ):
        server.apply(obj)
    yield server
    server.stop()


def started(api: FakeKubeAPI, absent_recheck: float = 60.0) -> KubernetesSource:
    src = KubernetesSource(
        api_client(api.url), settings=None, options=fast(absent_recheck), sync_timeout=5
    )
    src.start(Changes())
    return src


def ancestors(api: FakeKubeAPI, name: str) -> list[Obj]:
    obj = api.get("SourceIPPersistencePolicy", "default", name)
    assert obj is not None
    found: list[Obj] = (obj.get("status") or {}).get("ancestors") or []
    return found


def test_policies_are_read_and_their_status_written(api: FakeKubeAPI) -> None:
    src = started(api)
    writer = RouteStatusWriter(api_client(api.url), recheck_s=0.05, retry_s=0.05)
    try:
        state = src.state()
        policies = {p.name: p for p in state.source_ip_persistence_policies}
        assert set(policies) == {"sticky", "lost"}
        assert (policies["sticky"].table_size, policies["sticky"].expire) == ("64k", "10m")
        theirs = {
            "ancestorRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "x"},
            "controllerName": "example.com/other",
            "conditions": [],
        }
        stored = api.get("SourceIPPersistencePolicy", "default", "sticky")
        assert stored is not None
        api.apply({**stored, "status": {"ancestors": [theirs]}})
        writer.submit(route_statuses(state))
        assert writer.flush()
        sticky = ancestors(api, "sticky")
        assert sticky[0] == theirs
        ours = sticky[1]
        assert ours["ancestorRef"] == {
            "group": "",
            "kind": "Service",
            "namespace": "default",
            "name": "shop",
        }
        assert ours["controllerName"] == GATEWAY_CONTROLLER
        (accepted,) = ours["conditions"]
        assert (accepted["type"], accepted["status"], accepted["reason"]) == (
            "Accepted",
            "True",
            "Accepted",
        )
        assert accepted["lastTransitionTime"]
        (lost,) = ancestors(api, "lost")
        assert [(c["status"], c["reason"]) for c in lost["conditions"]] == [
            ("False", "TargetNotFound")
        ]
        assert any(
            p.endswith("/sourceippersistencepolicies/sticky/status")
            for m, p in api.requests
            if m == "PUT"
        )
    finally:
        writer.close()
        src.stop()


def test_without_the_crd_policies_are_off_and_the_rest_is_served(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.remove_group(POLICY_GROUP)
    caplog.set_level(logging.INFO, logger="controlplane.kube.informer")
    src = started(api, absent_recheck=0.1)
    try:
        state = src.state()
        assert state.source_ip_persistence_policies == ()
        assert [s.name for s in state.services] == ["shop"]
        assert src.optional_groups[PEERPLANE_POLICIES].missing and src.errors() == []
        wait_until(
            lambda: (
                sum(
                    1 for m, p in api.requests if "/sourceippersistencepolicies" in p and m == "GET"
                )
                >= 3
            )
        )
        said = [r for r in caplog.records if "is not served" in r.getMessage()]
        assert [r.levelno for r in said if POLICY_GROUP in r.getMessage()] == [logging.INFO]
        api.install_group(POLICY_GROUP)
        api.apply(source_ip_persistence_policy("sticky"))
        wait_until(
            lambda: [p.name for p in src.state().source_ip_persistence_policies] == ["sticky"]
        )
    finally:
        src.stop()
