"""The fake API server refuses and fills in what tests/realkube found a real one does.

Each message is the real kube-apiserver's (v1.36), taken from tests/cluster's cluster:
an EndpointSlice endpoint address in the loopback range and an ownerReference without
apiVersion or uid are 422 Invalid; a created object gets the server's uid, not the
client's; every Namespace carries the label `kubernetes.io/metadata.name`; an Ingress
created without a class gets the default IngressClass's name. The test hook
`apply` refuses the first two as `create` does, unless the server was started with
`allow_loopback_endpoints=True` (for tests that send traffic to loopback backends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    config_map,
    endpoint_slice,
    ingress,
    ingress_class,
    namespace,
    pod,
)

LOOPBACK = "may not be in the loopback range (127.0.0.0/8, ::1/128)"
UID = "0d6f3a52-2c1e-4b7a-9a55-6e1f0c9b7a01"


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    yield server
    server.stop()


@pytest.fixture
def apis(api: FakeKubeAPI) -> client.ApiClient:
    return api_client(api.url)


def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as error:
        call()
    return error.value.status, json.loads(error.value.body)["message"]


def test_loopback_endpoint_addresses_are_refused_in_the_api_servers_words(
    api: FakeKubeAPI, apis: client.ApiClient
) -> None:
    discovery = client.DiscoveryV1Api(apis)
    one = endpoint_slice("shop", {"127.0.0.5": True})
    status, text = refused(lambda: discovery.create_namespaced_endpoint_slice("default", one))
    assert status == 422
    assert text == (
        'EndpointSlice.discovery.k8s.io "shop-abc" is invalid: endpoints[0].addresses[0]: '
        f'Invalid value: "127.0.0.5": {LOOPBACK}'
    )
    two = endpoint_slice("shop", {"10.0.3.1": True, "127.0.3.2": True, "127.0.3.3": True})
    _, text = refused(lambda: discovery.create_namespaced_endpoint_slice("default", two))
    assert text == (
        'EndpointSlice.discovery.k8s.io "shop-abc" is invalid: ['
        f'endpoints[1].addresses[0]: Invalid value: "127.0.3.2": {LOOPBACK}, '
        f'endpoints[2].addresses[0]: Invalid value: "127.0.3.3": {LOOPBACK}]'
    )
    with pytest.raises(Exception, match="may not be in the loopback range"):
        api.apply(endpoint_slice("shop", {"127.0.2.1": True}))
    assert api.list("EndpointSlice") == []
    fine = endpoint_slice("shop", {"10.0.2.1": True})
    discovery.create_namespaced_endpoint_slice("default", fine)
    assert [o["metadata"]["name"] for o in api.list("EndpointSlice")] == ["shop-abc"]


def test_loopback_endpoints_are_stored_when_opted_in() -> None:
    with FakeKubeAPI(allow_loopback_endpoints=True) as api:
        api.apply(endpoint_slice("shop", {"127.0.2.1": True}))
        discovery = client.DiscoveryV1Api(api_client(api.url))
        blog = endpoint_slice("blog", {"127.0.2.2": True})
        blog["metadata"]["name"] = "blog-abc"
        discovery.create_namespaced_endpoint_slice("default", blog)
        assert len(api.list("EndpointSlice")) == 2


def test_owner_references_need_api_version_and_uid(
    api: FakeKubeAPI, apis: client.ApiClient
) -> None:
    core = client.CoreV1Api(apis)
    owned = config_map("owned")
    owned["metadata"]["ownerReferences"] = [
        {"kind": "ReplicaSet", "name": "haproxy-7d9f", "controller": True}
    ]
    status, text = refused(lambda: core.create_namespaced_config_map("haproxy-system", owned))
    assert status == 422
    assert text == (
        'ConfigMap "owned" is invalid: [metadata.ownerReferences.apiVersion: Invalid value: '
        '"": version must not be empty, metadata.ownerReferences.uid: Invalid value: "": '
        "must not be empty]"
    )
    owned["metadata"]["ownerReferences"][0]["apiVersion"] = "apps/v1"
    _, text = refused(lambda: core.create_namespaced_config_map("haproxy-system", owned))
    assert text == (
        'ConfigMap "owned" is invalid: metadata.ownerReferences.uid: Invalid value: "": '
        "must not be empty"
    )
    bare = pod("haproxy-a", "127.0.0.11")
    del bare["metadata"]["ownerReferences"][0]["uid"]
    with pytest.raises(Exception, match=r"metadata\.ownerReferences\.uid"):
        api.apply(bare)
    # The builders' references are complete, and an owner's uid matches its dependents'.
    core.create_namespaced_pod(
        "haproxy-system", pod("haproxy-a", "127.0.0.11"), _preload_content=False
    )
    assert api.get("Pod", "haproxy-system", "haproxy-a") is not None


def test_a_created_object_gets_the_servers_uid_and_a_namespace_its_name_label(
    api: FakeKubeAPI, apis: client.ApiClient
) -> None:
    core = client.CoreV1Api(apis)
    mine = config_map("mine")
    mine["metadata"]["uid"] = UID
    created = core.create_namespaced_config_map("haproxy-system", mine)
    assert created.metadata.uid and created.metadata.uid != UID
    core.create_namespace(namespace("team-a", team="a"))
    labels = core.read_namespace("team-a").metadata.labels
    assert labels == {"team": "a", "kubernetes.io/metadata.name": "team-a"}


def test_an_ingress_created_without_a_class_gets_the_default_one(
    api: FakeKubeAPI, apis: client.ApiClient
) -> None:
    networking = client.NetworkingV1Api(apis)
    networking.create_namespaced_ingress("default", ingress("before", class_name=None))
    api.apply(ingress_class("other"))
    api.apply(ingress_class("peerplane", default=True))
    networking.create_namespaced_ingress("default", ingress("after", class_name=None))
    api.apply(ingress("hooked", class_name=None))
    api.apply(ingress("legacy", class_name=None, annotations={"kubernetes.io/ingress.class": "x"}))
    api.apply(ingress("mine", class_name="other"))
    classes = {
        i["metadata"]["name"]: i["spec"].get("ingressClassName") for i in api.list("Ingress")
    }
    # Admission only: one created before the default class exists keeps none.
    assert classes == {
        "before": None,
        "after": "peerplane",
        "hooked": "peerplane",
        "legacy": None,
        "mine": "other",
    }
