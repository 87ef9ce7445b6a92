"""The fake API server's paged lists: the collection as of the first page, as a real API
server's continue tokens give it, without a copy of every object per list (a list of
8,000 EndpointSlices copied them all: 2.3 s of the fake's CPU at every first start)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import FakeKubeAPI, server
from tests.kubeapi.objects import api_client, config_map

pytestmark = pytest.mark.integration


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI().start()
    yield fake
    fake.stop()


def page(api: FakeKubeAPI, token: str = "") -> dict[str, Any]:
    query: list[tuple[str, Any]] = [("limit", 100)] + ([("continue", token)] if token else [])
    response = api_client(api.url).call_api(
        "/api/v1/namespaces/{namespace}/configmaps",
        "GET",
        {"namespace": "ns"},
        query,
        {"Accept": "application/json"},
        response_type="object",
        auth_settings=["BearerToken"],
        _return_http_data_only=True,
        _preload_content=False,
    )
    found: dict[str, Any] = json.loads(response.data)
    return found


def test_a_paged_list_is_the_collection_as_of_its_first_page_without_copies(
    api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(250):
        api.apply(config_map(f"cm-{i:03}", "ns", n=str(i)))
    copies: list[int] = []
    real = copy.deepcopy

    def counted(obj: Any, *args: Any) -> Any:
        copies.append(1)
        return real(obj, *args)

    monkeypatch.setattr(server.copy, "deepcopy", counted)
    first = page(api)
    assert copies == [], "the first page copied the collection"
    version = first["metadata"]["resourceVersion"]
    monkeypatch.setattr(server.copy, "deepcopy", real)
    api.apply(config_map("cm-150", "ns", n="changed"))
    api.delete("ConfigMap", "ns", "cm-151")
    api.apply(config_map("cm-999", "ns", n="new"))
    names, token = [o["metadata"]["name"] for o in first["items"]], first["metadata"]["continue"]
    rest: list[dict[str, Any]] = []
    while token:
        found = page(api, token)
        assert found["metadata"]["resourceVersion"] == version
        rest += found["items"]
        token = found["metadata"].get("continue", "")
    names += [o["metadata"]["name"] for o in rest]
    assert names == [f"cm-{i:03}" for i in range(250)], "as of the first page"
    assert next(o for o in rest if o["metadata"]["name"] == "cm-150")["data"] == {"n": "150"}
    assert [o["data"]["n"] for o in page(api)["items"][:1]] == ["0"]
