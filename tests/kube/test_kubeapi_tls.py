"""The fake API server serves the TLS inputs as a real one does, through the real client:
Secrets (core v1) with the apiserver's validation of kubernetes.io/tls, base64 data,
`stringData`, the immutable type and the 1 MiB limit, the `type` field selector and a
400 for a field label a collection does not support; TLSRoute and TCPRoute under
gateway.networking.k8s.io/v1alpha2 with `/status` and generation; one kind uninstalled
alone (a cluster with the standard channel only)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.helpers.tls_certs import make_ca, tls_secret
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, http_route, tcp_route, tls_route
from tests.kubeapi.server import GATEWAY_GROUP, MAX_DATA_BYTES

Obj = dict[str, Any]
L4_VERSION = "v1"  # TLSRoute and TCPRoute in the standard channel since v1.5
LEAF = make_ca().issue("shop.example.com")


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    for obj in (http_route(), tls_route(), tcp_route()):
        server.apply(obj)
    yield server
    server.stop()


@pytest.fixture
def core(api: FakeKubeAPI) -> client.CoreV1Api:
    return client.CoreV1Api(api_client(api.url))


@pytest.fixture
def custom(api: FakeKubeAPI) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client(api.url))


def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as error:
        call()
    text = error.value.body
    if text.startswith("{"):
        text = json.loads(text)["message"]
    return error.value.status, text


def test_tls_secrets_are_stored_and_listed_by_the_type_field_selector(
    core: client.CoreV1Api,
) -> None:
    core.create_namespaced_secret("shop", tls_secret("shop-tls", LEAF, "shop"))
    opaque = tls_secret("notes", LEAF, "shop", type_="Opaque")
    core.create_namespaced_secret("shop", opaque)
    core.create_namespaced_secret("shop", {"metadata": {"name": "untyped"}, "data": {}})
    listed = core.list_secret_for_all_namespaces(field_selector="type=kubernetes.io/tls")
    assert [s.metadata.name for s in listed.items] == ["shop-tls"]
    assert base64.b64decode(listed.items[0].data["tls.crt"]) == LEAF.cert_pem
    others = core.list_secret_for_all_namespaces(field_selector="type!=kubernetes.io/tls")
    assert sorted(s.metadata.name for s in others.items) == ["notes", "untyped"]
    assert core.read_namespaced_secret("untyped", "shop").type == "Opaque"  # the default
    named = core.list_namespaced_secret("shop", field_selector="metadata.name=notes")
    assert [s.metadata.name for s in named.items] == ["notes"]


def test_an_unsupported_field_selector_is_400(core: client.CoreV1Api) -> None:
    assert refused(lambda: core.list_secret_for_all_namespaces(field_selector="data=x")) == (
        400,
        '"field label not supported: data"',
    )
    assert refused(
        lambda: core.list_secret_for_all_namespaces(field_selector="spec.type=x", watch=True)
    ) == (400, '"field label not supported: spec.type"')
    # `type` is a Secret's field label, not a ConfigMap's.
    status, _ = refused(
        lambda: core.list_config_map_for_all_namespaces(field_selector="type=kubernetes.io/tls")
    )
    assert status == 400


@pytest.mark.parametrize(
    ("change", "code", "message"),
    [
        (
            lambda s: s["data"].pop("tls.key"),
            422,
            'Secret "shop-tls" is invalid: data[tls.key]: Required value',
        ),
        (lambda s: s.pop("data"), 422, 'Secret "shop-tls" is invalid: data[tls.crt]: Required'),
        (
            lambda s: s["data"].update({"tls.crt": "not*base64"}),
            400,
            'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at '
            "input byte 3",
        ),
        (
            lambda s: s["data"].update({"extra": "AAAA" * (MAX_DATA_BYTES // 3)}),
            422,
            f'Secret "shop-tls" is invalid: data: Too long: may not be more than {MAX_DATA_BYTES}',
        ),
        (
            lambda s: s["data"].update({"bad/key": "eA=="}),
            422,
            'Secret "shop-tls" is invalid: data[bad/key]: Invalid value',
        ),
    ],
)
def test_an_invalid_tls_secret_is_refused_in_the_api_servers_words(
    api: FakeKubeAPI, core: client.CoreV1Api, change: Any, code: int, message: str
) -> None:
    secret = tls_secret("shop-tls", LEAF, "shop")
    change(secret)
    status, text = refused(lambda: core.create_namespaced_secret("shop", secret))
    assert status == code and text.startswith(message), text
    assert api.get("Secret", "shop", "shop-tls") is None
    assert "PRIVATE" not in text and LEAF.cert_pem.decode()[30:60] not in text


def test_the_size_limit_counts_decoded_bytes(api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    """1 MiB of certificate data is 1.33 MiB of base64: stored, as a real server does."""
    secret = tls_secret("big", LEAF, "shop")
    secret["data"]["ca.crt"] = base64.b64encode(b"x" * (MAX_DATA_BYTES - 4096)).decode()
    core.create_namespaced_secret("shop", secret)
    assert api.get("Secret", "shop", "big") is not None


def test_string_data_goes_into_data_and_the_type_cannot_change(
    api: FakeKubeAPI, core: client.CoreV1Api
) -> None:
    body = {
        "metadata": {"name": "shop-tls"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": base64.b64encode(b"old").decode()},
        "stringData": {"tls.crt": LEAF.cert_pem.decode(), "tls.key": LEAF.key_pem.decode()},
    }
    core.create_namespaced_secret("shop", body)
    stored = api.get("Secret", "shop", "shop-tls")
    assert stored is not None and "stringData" not in stored
    assert base64.b64decode(stored["data"]["tls.crt"]) == LEAF.cert_pem
    assert base64.b64decode(stored["data"]["tls.key"]) == LEAF.key_pem
    stored["type"] = "Opaque"
    status, text = refused(lambda: core.replace_namespaced_secret("shop-tls", "shop", stored))
    assert (status, text) == (
        422,
        'Secret "shop-tls" is invalid: type: Invalid value: "Opaque": field is immutable',
    )
    status, _ = refused(
        lambda: core.patch_namespaced_secret("shop-tls", "shop", {"data": {"tls.key": None}})
    )
    assert status == 422  # a patch is validated as merged


def test_tls_and_tcp_routes_are_served_at_v1_with_status_and_generation(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    for plural, name in (("tlsroutes", "db"), ("tcproutes", "pg")):
        listed = custom.list_cluster_custom_object(GATEWAY_GROUP, L4_VERSION, plural)
        assert [i["metadata"]["name"] for i in listed["items"]] == [name]
        stored = custom.get_namespaced_custom_object(
            GATEWAY_GROUP, L4_VERSION, "default", plural, name
        )
        assert stored["metadata"]["generation"] == 1
        stored["status"] = {"parents": []}
        written = custom.replace_namespaced_custom_object_status(
            GATEWAY_GROUP, L4_VERSION, "default", plural, name, stored
        )
        assert written["status"] == {"parents": []} and written["metadata"]["generation"] == 1
        written["spec"]["rules"][0]["backendRefs"][0]["port"] = 6432
        written.pop("status")
        changed = custom.replace_namespaced_custom_object(
            GATEWAY_GROUP, L4_VERSION, "default", plural, name, written
        )
        assert changed["metadata"]["generation"] == 2 and changed["status"] == {"parents": []}
        status, _ = refused(
            lambda plural=plural: custom.list_cluster_custom_object(
                GATEWAY_GROUP, "v1alpha2", plural
            )
        )
        assert status == 404  # v1.5+'s standard channel: `served: false` at v1alpha2


def test_one_kind_removed_alone_is_404_while_its_group_is_served(
    api: FakeKubeAPI, custom: client.CustomObjectsApi
) -> None:
    api.remove_kind("TLSRoute")
    api.remove_kind("TCPRoute")
    for plural in ("tlsroutes", "tcproutes"):
        status, _ = refused(
            lambda plural=plural: custom.list_cluster_custom_object(
                GATEWAY_GROUP, L4_VERSION, plural
            )
        )
        assert status == 404
    assert api.list("TLSRoute") == [] and api.list("TCPRoute") == []
    routes = custom.list_cluster_custom_object(GATEWAY_GROUP, "v1", "httproutes")
    assert [r["metadata"]["name"] for r in routes["items"]] == ["shop"]
    api.install_kind("TLSRoute")
    assert custom.list_cluster_custom_object(GATEWAY_GROUP, L4_VERSION, "tlsroutes")["items"] == []
    # Removing the group removes the experimental kinds with it.
    api.apply(tls_route())
    api.remove_group(GATEWAY_GROUP)
    assert api.list("TLSRoute") == []
    status, _ = refused(
        lambda: custom.list_cluster_custom_object(GATEWAY_GROUP, L4_VERSION, "tlsroutes")
    )
    assert status == 404
