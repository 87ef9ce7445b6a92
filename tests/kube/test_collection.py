"""`CollectionLister` sends what the official client's typed `list_*` methods send, so
the informers built from the table of input kinds ask the API server exactly what the
typed methods asked before (path, query parameters in order, headers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from controlplane.kube.collection import CollectionLister

ARGS: dict[str, Any] = {
    "limit": 500,
    "_continue": "token",
    "_preload_content": False,
    "_request_timeout": (10.0, 90.0),
}
WATCH: dict[str, Any] = {
    "watch": True,
    "resource_version": "42",
    "allow_watch_bookmarks": True,
    "timeout_seconds": 300,
    "_preload_content": False,
    "_request_timeout": (10.0, 90.0),
}


def sent(call: Callable[..., Any], api: client.ApiClient, kwargs: dict[str, Any]) -> list[Any]:
    """The GET requests `call(**kwargs)` makes through `api`."""
    requests: list[Any] = []

    def get(url: str, **options: Any) -> object:
        requests.append((url, options))
        return object()

    api.rest_client.GET = get  # type: ignore[method-assign]
    call(**kwargs)
    return requests


def typed_and_generic(api: client.ApiClient) -> list[tuple[str, Callable[..., Any], Any]]:
    core, discovery = client.CoreV1Api(api), client.DiscoveryV1Api(api)
    custom, networking = client.CustomObjectsApi(api), client.NetworkingV1Api(api)
    return [
        (
            "services",
            core.list_service_for_all_namespaces,
            CollectionLister(api, "", "v1", "services"),
        ),
        (
            "pods",
            lambda **kw: core.list_pod_for_all_namespaces(label_selector="a=b", **kw),
            CollectionLister(api, "", "v1", "pods", label_selector="a=b"),
        ),
        (
            "endpointslices",
            lambda **kw: discovery.list_endpoint_slice_for_all_namespaces(
                label_selector="kubernetes.io/service-name", **kw
            ),
            CollectionLister(
                api,
                "discovery.k8s.io",
                "v1",
                "endpointslices",
                label_selector="kubernetes.io/service-name",
            ),
        ),
        (
            "settings",
            lambda **kw: core.list_namespaced_config_map(
                "haproxy-system", field_selector="metadata.name=haproxy-settings", **kw
            ),
            CollectionLister(
                api,
                "",
                "v1",
                "configmaps",
                namespace="haproxy-system",
                field_selector="metadata.name=haproxy-settings",
            ),
        ),
        (
            "ingressclasses",
            networking.list_ingress_class,
            CollectionLister(api, "networking.k8s.io", "v1", "ingressclasses"),
        ),
        (
            "httproutes",
            lambda **kw: custom.list_cluster_custom_object(
                "gateway.networking.k8s.io", "v1", "httproutes", **kw
            ),
            CollectionLister(api, "gateway.networking.k8s.io", "v1", "httproutes"),
        ),
    ]


@pytest.mark.parametrize("kwargs", [ARGS, WATCH], ids=["list", "watch"])
def test_the_generic_lister_sends_what_the_typed_methods_send(kwargs: dict[str, Any]) -> None:
    config = client.Configuration(host="https://127.0.0.1:6443")
    config.api_key = {"authorization": "Bearer t0ken"}
    api = client.ApiClient(config)
    try:
        for name, typed, generic in typed_and_generic(api):
            expected = sent(typed, api, kwargs)
            assert sent(generic, api, kwargs) == expected, name
            assert (
                len(expected) == 1 and expected[0][1]["headers"]["authorization"] == "Bearer t0ken"
            )
    finally:
        api.close()


def test_an_argument_the_typed_methods_do_not_take_is_refused() -> None:
    api = client.ApiClient(client.Configuration(host="https://127.0.0.1:6443"))
    try:
        with pytest.raises(TypeError, match="pretty_please"):
            CollectionLister(api, "", "v1", "pods")(pretty_please=True)
    finally:
        api.close()
