"""The fake API server serves the route kinds as a real one does, through the real client:
Gateway API (GatewayClass, Gateway, HTTPRoute; ReferenceGrant v1beta1), Ingress and
IngressClass, Namespaces; the `/status` subresource, generation, conflicts, 404s, and
an uninstalled Gateway API group."""

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
    gateway,
    gateway_class,
    http_route,
    ingress,
    ingress_class,
    namespace,
    reference_grant,
)
from tests.kubeapi.server import GATEWAY_GROUP

Obj = dict[str, Any]


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    for obj in (
        namespace("default"),
        namespace("team-a", team="a"),
        gateway_class(),
        gateway(),
        http_route(),
        reference_grant("allow-a", "default", "team-a"),
        ingress_class(default=True),
        ingress(),
    ):
        server.apply(obj)
    yield server
    server.stop()


@pytest.fixture
def custom(api: FakeKubeAPI) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client(api.url))


def condition(kind: str = "Accepted", status: str = "True", reason: str = "Accepted") -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": "",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-01-02T03:04:05Z",
    }


def names(body: Any) -> list[str]:
    return sorted(item["metadata"]["name"] for item in body["items"])


def test_every_route_kind_lists_through_its_client(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    apis = api_client(api.url)
    assert names(custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "gatewayclasses")) == [
        "peerplane"
    ]
    assert names(custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "gateways")) == ["web"]
    assert names(custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "httproutes")) == ["shop"]
    grants = custom.list_cluster_custom_object(GATEWAY_GROUP, "v1beta1", "referencegrants")
    assert names(grants) == ["allow-a"]
    networking = client.NetworkingV1Api(apis)
    assert [i.metadata.name for i in networking.list_ingress_for_all_namespaces().items] == ["shop"]
    assert [c.metadata.name for c in networking.list_ingress_class().items] == ["peerplane"]
    spaces = client.CoreV1Api(apis).list_namespace()
    # The real server labels every Namespace with its name (the namespace strategy).
    assert {n.metadata.name: n.metadata.labels for n in spaces.items}["team-a"] == {
        "team": "a",
        "kubernetes.io/metadata.name": "team-a",
    }


def test_paths_a_real_server_does_not_serve_are_404(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    """ReferenceGrant is v1beta1 in the standard channel; a cluster-scoped kind has no
    namespace; ReferenceGrant and IngressClass have no `/status`."""
    for call in (
        lambda: custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "referencegrants"),
        lambda: custom.list_namespaced_custom_object(
            GATEWAY_GROUP, "v1", "default", "gatewayclasses"
        ),
        lambda: custom.get_namespaced_custom_object_status(
            GATEWAY_GROUP, "v1beta1", "default", "referencegrants", "allow-a"
        ),
    ):
        with pytest.raises(ApiException) as error:
            call()
        assert error.value.status == 404


def test_a_status_write_changes_only_the_status(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    stored = custom.get_namespaced_custom_object(GATEWAY_GROUP, "v1", "default", "gateways", "web")
    body = json.loads(json.dumps(stored))
    body["spec"]["listeners"][0]["port"] = 8080  # ignored by /status
    body["metadata"]["labels"] = {"sneaked": "in"}  # ignored by /status
    body["status"] = {"conditions": [condition()]}
    written = custom.replace_namespaced_custom_object_status(
        GATEWAY_GROUP, "v1", "default", "gateways", "web", body
    )
    assert written["status"] == {"conditions": [condition()]}
    assert written["spec"]["listeners"][0]["port"] == 80
    assert "labels" not in written["metadata"]
    assert written["metadata"]["generation"] == 1
    assert int(written["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])


def test_a_write_to_the_main_resource_keeps_the_status_and_counts_spec_changes(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    route = custom.get_namespaced_custom_object(
        GATEWAY_GROUP, "v1", "default", "httproutes", "shop"
    )
    route["status"] = {"parents": [{"parentRef": {"name": "web"}, "controllerName": "x"}]}
    custom.replace_namespaced_custom_object_status(
        GATEWAY_GROUP, "v1", "default", "httproutes", "shop", route
    )
    stored = api.get("HTTPRoute", "default", "shop")
    assert stored is not None
    edited = json.loads(json.dumps(stored))
    edited["status"] = {"parents": []}  # ignored by the main resource
    edited["metadata"]["labels"] = {"tier": "web"}  # metadata: no new generation
    labelled = custom.replace_namespaced_custom_object(
        GATEWAY_GROUP, "v1", "default", "httproutes", "shop", edited
    )
    assert labelled["status"] == stored["status"]
    assert labelled["metadata"]["generation"] == 1
    labelled["spec"]["hostnames"] = ["other.example.com"]
    respecced = custom.replace_namespaced_custom_object(
        GATEWAY_GROUP, "v1", "default", "httproutes", "shop", labelled
    )
    assert respecced["metadata"]["generation"] == 2
    assert respecced["status"] == stored["status"]
    patched = custom.patch_namespaced_custom_object(
        GATEWAY_GROUP, "v1", "default", "httproutes", "shop", {"status": {"parents": []}}
    )
    assert patched["status"] == stored["status"]
    assert patched["metadata"]["resourceVersion"] == respecced["metadata"]["resourceVersion"]


def test_a_stale_status_write_is_a_conflict_and_a_missing_object_404(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    stale = custom.get_cluster_custom_object(GATEWAY_GROUP, "v1", "gatewayclasses", "peerplane")
    fresh = api.apply(gateway_class())  # someone else wrote meanwhile
    stale["status"] = {"conditions": [condition()]}
    with pytest.raises(ApiException) as conflict:
        custom.replace_cluster_custom_object_status(
            GATEWAY_GROUP, "v1", "gatewayclasses", "peerplane", stale
        )
    assert conflict.value.status == 409
    assert api.get("GatewayClass", "", "peerplane") == fresh
    with pytest.raises(ApiException) as missing:
        custom.replace_namespaced_custom_object_status(
            GATEWAY_GROUP, "v1", "default", "httproutes", "gone", {"status": {}}
        )
    assert missing.value.status == 404


def test_an_unchanged_status_write_is_no_write(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    body = {"status": {"conditions": [condition()]}}
    first = custom.patch_namespaced_custom_object_status(
        GATEWAY_GROUP, "v1", "default", "gateways", "web", body
    )
    again = custom.patch_namespaced_custom_object_status(
        GATEWAY_GROUP, "v1", "default", "gateways", "web", body
    )
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("lastTransitionTime"), "lastTransitionTime: Required value"),
        (lambda c: c.update(status="Maybe"), "status: Unsupported value"),
        (lambda c: c.update(reason="not a reason"), "reason: Invalid value"),
        (lambda c: c.update(lastTransitionTime="yesterday"), "lastTransitionTime: Invalid"),
    ],
)
def test_a_condition_the_crd_schema_refuses_is_422(
    api: FakeKubeAPI, custom: client.CustomObjectsApi, edit: Any, message: str
) -> None:
    bad = condition()
    edit(bad)
    before = api.get("Gateway", "default", "web")
    with pytest.raises(ApiException) as error:
        custom.patch_namespaced_custom_object_status(
            GATEWAY_GROUP, "v1", "default", "gateways", "web", {"status": {"conditions": [bad]}}
        )
    assert error.value.status == 422
    assert message in json.loads(error.value.body)["message"]
    assert api.get("Gateway", "default", "web") == before


def test_more_than_eight_conditions_are_refused(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    many = [condition(f"Type{i}") for i in range(9)]
    with pytest.raises(ApiException) as error:
        custom.patch_cluster_custom_object_status(
            GATEWAY_GROUP, "v1", "gatewayclasses", "peerplane", {"status": {"conditions": many}}
        )
    assert error.value.status == 422


def test_ingress_status_through_the_networking_client(api: FakeKubeAPI) -> None:
    networking = client.NetworkingV1Api(api_client(api.url))
    current = networking.read_namespaced_ingress("shop", "default")
    current.status = client.V1IngressStatus(
        load_balancer=client.V1IngressLoadBalancerStatus(
            ingress=[client.V1IngressLoadBalancerIngress(ip="127.0.0.11")]
        )
    )
    current.spec.rules[0].host = "ignored.example.com"
    written = networking.replace_namespaced_ingress_status("shop", "default", current)
    assert written.status.load_balancer.ingress[0].ip == "127.0.0.11"
    assert written.spec.rules[0].host == "shop.example.com"
    assert written.metadata.generation == 1


def test_an_uninstalled_group_is_404_and_deletes_its_objects(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    api.remove_group(GATEWAY_GROUP)
    with pytest.raises(ApiException) as error:
        custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "httproutes")
    assert error.value.status == 404
    networking = client.NetworkingV1Api(api_client(api.url))
    assert len(networking.list_ingress_for_all_namespaces().items) == 1  # others still served
    api.install_group(GATEWAY_GROUP)
    assert custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "httproutes")["items"] == []


def test_an_ingress_status_write_takes_labels_and_annotations_from_the_body(
    api: FakeKubeAPI,
) -> None:
    """As the real Ingress status strategy (it copies only spec from the stored object): a
    status body without the labels drops them; a CRD's status write keeps them."""
    api.apply({**ingress(), "metadata": {**ingress()["metadata"], "labels": {"team": "a"}}})
    networking = client.NetworkingV1Api(api_client(api.url))
    current = api.get("Ingress", "default", "shop")
    assert current is not None
    bare = {
        "metadata": {"name": "shop", "namespace": "default"},
        "status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.11"}]}},
    }
    written = networking.replace_namespaced_ingress_status("shop", "default", bare)
    assert written.metadata.labels is None
    assert written.metadata.uid == current["metadata"]["uid"]
