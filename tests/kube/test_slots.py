"""ConfigMapSlotStore against the fake API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import MappingProxyType

import pytest
from kubernetes.client.exceptions import ApiException

from controlplane.compute.types import BackendSlots, SlotAssignment
from controlplane.kube.slots import SLOTS_KEY, ConfigMapSlotStore
from controlplane.model import ObjectRef
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, config_map

REF = ObjectRef("haproxy-system", "peerplane-slots")
ASSIGNMENT: SlotAssignment = {
    "default_shop_http": BackendSlots(
        count=42, slots=MappingProxyType({("127.0.1.2", 8080): 1, ("127.0.1.1", 8080): 2})
    ),
    "default_blog_http": BackendSlots(count=42, slots=MappingProxyType({})),
}


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    yield server
    server.stop()


def store(api: FakeKubeAPI) -> ConfigMapSlotStore:
    return ConfigMapSlotStore(api_client(api.url), REF, request_timeout=2.0, read_attempts=2)


def plain(assignment: SlotAssignment) -> dict[str, tuple[int, dict[tuple[str, int], int]]]:
    return {name: (b.count, dict(b.slots)) for name, b in assignment.items()}


def test_missing_configmap_is_an_empty_assignment(api: FakeKubeAPI) -> None:
    assert store(api).load() == ({}, [])


def test_round_trip_across_two_processes(api: FakeKubeAPI) -> None:
    first = store(api)
    first.load()
    first.save(ASSIGNMENT)  # creates
    moved = dict(ASSIGNMENT)
    moved["default_blog_http"] = BackendSlots(42, MappingProxyType({("127.0.2.1", 80): 1}))
    first.save(moved)  # replaces with the resourceVersion it holds
    saved = api.get("ConfigMap", REF.namespace, REF.name)
    assert saved is not None and saved["metadata"]["labels"]["app.kubernetes.io/managed-by"]
    assignment, problems = store(api).load()  # a new leader reads it back
    assert problems == []
    assert plain(assignment) == plain(moved)


def test_a_write_by_a_former_leader_is_overwritten(api: FakeKubeAPI) -> None:
    leader = store(api)
    leader.load()
    leader.save(ASSIGNMENT)
    former = api.get("ConfigMap", REF.namespace, REF.name) or {}
    former["data"][SLOTS_KEY] = "{}"
    api.apply(former)  # our resourceVersion is now stale: the replace gets 409
    leader.save(ASSIGNMENT)
    assignment, problems = store(api).load()
    assert problems == [] and plain(assignment) == plain(ASSIGNMENT)


@pytest.mark.parametrize(
    ("content", "why"),
    [("{not json", "not JSON"), ('{"format": 99}', "unknown format"), (None, "missing")],
)
def test_corrupted_content_is_reported_and_rebuilt(
    api: FakeKubeAPI, content: str | None, why: str
) -> None:
    obj = config_map(REF.name, REF.namespace)
    obj["data"] = {SLOTS_KEY: content} if content is not None else {}
    api.apply(obj)
    slots = store(api)
    assignment, problems = slots.load()
    assert assignment == {}
    assert len(problems) == 1 and why in problems[0] and str(REF) in problems[0]
    slots.save(ASSIGNMENT)  # and the rebuilt assignment replaces the bad content
    saved = json.loads((api.get("ConfigMap", REF.namespace, REF.name) or {})["data"][SLOTS_KEY])
    assert set(saved["backends"]) == set(ASSIGNMENT)


def test_unreachable_api_raises_instead_of_rebuilding(api: FakeKubeAPI) -> None:
    api.fail_next("ConfigMap", 503, count=2)
    with pytest.raises(ApiException) as raised:
        store(api).load()
    assert raised.value.status == 503
