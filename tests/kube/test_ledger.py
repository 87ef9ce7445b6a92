"""The Kubernetes slot ledger against the fake API server: one ConfigMap shard per
backend, written in O(changed), watched by every replica, repaired by the leader.

The fake API server enforces the real limits (1 MiB of ConfigMap data, 3 MiB requests,
409 per object), so the single-object ledger of earlier versions is refused here at 2,000
Services exactly as a cluster refuses it, and the sharded one is not.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from types import MappingProxyType

import pytest
from kubernetes.client.exceptions import ApiException

from controlplane.compute.types import BackendSlots, SlotAssignment
from controlplane.kube.ledger_store import LedgerReadError
from controlplane.ledger.codec import assignment_to_json
from controlplane.ledger.shards import (
    HASH_KEY,
    LEDGER_LABEL,
    MAX_OBJECT_BYTES,
    MIGRATED_ANNOTATION,
    SLOTS_KEY,
    max_shard_bytes,
    shard_name,
)
from controlplane.ledger.store import LedgerWriteError
from tests.helpers.ledger import REF, data_limit_objects, kube_ledger
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, config_map, wait_until

SHOP, BLOG = "default_shop_http", "default_blog_http"
ASSIGNMENT: SlotAssignment = {
    SHOP: BackendSlots(
        count=42, slots=MappingProxyType({("127.0.1.2", 8080): 1, ("127.0.1.1", 8080): 2})
    ),
    BLOG: BackendSlots(count=42, slots=MappingProxyType({})),
}


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    yield server
    server.stop()


def plain(assignment: SlotAssignment) -> dict[str, tuple[int, dict[tuple[str, int], int]]]:
    return {name: (b.count, dict(b.slots)) for name, b in assignment.items()}


def shards(api: FakeKubeAPI) -> dict[str, dict[str, object]]:
    return {
        o["metadata"]["name"]: o
        for o in api.list("ConfigMap")
        if (o["metadata"].get("labels") or {}).get(LEDGER_LABEL) == REF.name
    }


def writes(api: FakeKubeAPI) -> list[tuple[str, str]]:
    return [(m, p) for m, p in api.requests if m in ("POST", "PUT", "DELETE", "PATCH")]


def test_missing_ledger_is_an_empty_assignment(api: FakeKubeAPI) -> None:
    with kube_ledger(api.url) as (ledger, _):
        assert ledger.load() == ({}, [])


def test_one_shard_per_backend_round_trip_across_two_processes(api: FakeKubeAPI) -> None:
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
    found = shards(api)
    assert set(found) == {shard_name(REF.name, SHOP), shard_name(REF.name, BLOG)}
    assert shard_name(REF.name, SHOP) == "peerplane-slots.default.shop.http"
    with kube_ledger(api.url) as (successor, _):  # a new leader reads them back
        assignment, problems = successor.load()
    assert problems == [] and plain(assignment) == plain(ASSIGNMENT)


def test_a_change_writes_only_its_backend_and_a_removed_backend_is_deleted(
    api: FakeKubeAPI,
) -> None:
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        before = len(writes(api))
        moved = dict(ASSIGNMENT)
        moved[BLOG] = BackendSlots(42, MappingProxyType({("127.0.2.1", 80): 1}))
        ledger.save(moved)
        assert [m for m, _ in writes(api)[before:]] == ["PUT"]
        assert shard_name(REF.name, BLOG) in writes(api)[-1][1]
        ledger.save({SHOP: ASSIGNMENT[SHOP]})
        assert [m for m, _ in writes(api)[before + 1 :]] == ["DELETE"]
        ledger.save({SHOP: ASSIGNMENT[SHOP]})  # nothing changed: nothing written
        assert len(writes(api)) == before + 2
    assert set(shards(api)) == {shard_name(REF.name, SHOP)}


def test_late_echoes_of_our_own_writes_and_delete_are_not_drift(api: FakeKubeAPI) -> None:
    """The watch may deliver a shard's create after our update of it, or after our delete:
    those are our own writes, never "rewritten by someone else", and cost no write."""
    with kube_ledger(api.url) as (ledger, watch):
        ledger.load()
        drifts: list[int] = []
        ledger.on_drift(lambda: drifts.append(1))
        seen: list[tuple[str, bool]] = []  # told after the ledger: it has seen what we see
        watch.on_shard(lambda backend, shard: seen.append((backend, shard is None)))
        api.hold_watches()
        ledger.save(ASSIGNMENT)
        moved = dict(ASSIGNMENT)
        moved[BLOG] = BackendSlots(42, MappingProxyType({("127.0.2.1", 80): 1}))
        ledger.save(moved)
        ledger.save({SHOP: ASSIGNMENT[SHOP]})
        before = len(writes(api))
        api.release_watches()
        assert wait_until(lambda: (BLOG, True) in seen, timeout=10)  # the delete came last
        assert seen == [(SHOP, False), (BLOG, False), (BLOG, False), (BLOG, True)]
        assert drifts == [] and not ledger.dirty()
        ledger.save({SHOP: ASSIGNMENT[SHOP]})
        assert len(writes(api)) == before


def test_a_conflict_on_one_shard_rewrites_that_shard_only(api: FakeKubeAPI) -> None:
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        api.fail_next("ConfigMap", 409, match=shard_name(REF.name, SHOP))
        before = len(writes(api))
        changed = {
            name: BackendSlots(43, slots.slots, slots.freed, slots.freed_by)
            for name, slots in ASSIGNMENT.items()
        }
        ledger.save({SHOP: changed[SHOP], BLOG: ASSIGNMENT[BLOG]})
        puts = [p for m, p in writes(api)[before:] if m == "PUT"]
        assert len(puts) == 2 and all(shard_name(REF.name, SHOP) in p for p in puts)
    with kube_ledger(api.url) as (successor, _):
        assignment, _ = successor.load()
    assert assignment[SHOP].count == 43 and assignment[BLOG].count == 42


@pytest.mark.parametrize(
    ("code", "cause"), [(422, "invalid"), (403, "forbidden"), (413, "too-large")]
)
def test_a_refused_write_is_permanent_and_named(api: FakeKubeAPI, code: int, cause: str) -> None:
    grown = {name: BackendSlots(43, s.slots) for name, s in ASSIGNMENT.items()}
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        api.fail_next("ConfigMap", code, match=shard_name(REF.name, SHOP))
        with pytest.raises(LedgerWriteError) as raised:
            ledger.save(grown)
        assert raised.value.permanent and raised.value.cause == cause
        assert f"HTTP {code}" in str(raised.value)
        assert raised.value.unwritten == {SHOP}, "BLOG's shard was written"
        ledger.save(grown)  # the next save writes what failed
    with kube_ledger(api.url) as (successor, _):
        assert plain(successor.load()[0]) == plain(grown)


def test_a_transient_failure_is_retryable(api: FakeKubeAPI) -> None:
    grown = {name: BackendSlots(43, s.slots) for name, s in ASSIGNMENT.items()}
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        api.fail_next("ConfigMap", 503, match=shard_name(REF.name, BLOG))
        with pytest.raises(LedgerWriteError) as raised:
            ledger.save(grown)
        assert not raised.value.permanent and raised.value.cause == "http-503"
        ledger.save(grown)
    with kube_ledger(api.url) as (successor, _):
        assert plain(successor.load()[0]) == plain(grown)


def test_unreachable_api_raises_instead_of_rebuilding(api: FakeKubeAPI) -> None:
    api.fail_next("ConfigMap", 503, count=1000)
    with kube_ledger(api.url) as (ledger, _):
        ledger._read_timeout = 1.0
        with pytest.raises(LedgerReadError, match="503"):
            ledger.load()


def damage(api: FakeKubeAPI, how: str) -> str:
    """Damage the shop backend's shard as an operator or a former leader could; its name."""
    name = shard_name(REF.name, SHOP)
    obj = api.get("ConfigMap", REF.namespace, name)
    assert obj is not None
    if how == "delete":
        api.delete("ConfigMap", REF.namespace, name)
        return name
    if how == "corrupt":
        obj["data"][SLOTS_KEY] = "{not json"
    elif how == "edit-slots":  # two slots swapped by hand: the hash no longer matches
        doc = json.loads(obj["data"][SLOTS_KEY])
        doc["backends"][SHOP]["slots"] = [["127.0.1.1", 8080, 1], ["127.0.1.2", 8080, 2]]
        obj["data"][SLOTS_KEY] = json.dumps(doc)
    else:  # a former leader's write: signed, but not what this leader holds
        other = BackendSlots(42, MappingProxyType({("127.0.1.9", 8080): 1}))
        text = json.dumps(assignment_to_json({SHOP: other}))
        obj["data"][SLOTS_KEY] = text
        obj["data"][HASH_KEY] = hashlib.sha256(text.encode()).hexdigest()
    api.apply(obj)
    return name


@pytest.mark.parametrize("edit", ["delete", "corrupt", "edit-slots", "former-leader"])
def test_the_leader_writes_a_damaged_shard_again_at_once(api: FakeKubeAPI, edit: str) -> None:
    """A deleted ledger cut traffic through every HAProxy served by a follower, and the
    leader did not rewrite it until its next slot change; two slots edited by hand made
    the replicas disagree on what SRV_1 means for 20 s and more. The leader now notices
    any shard that is not what it wrote and writes its own again."""
    woken: list[float] = []
    with kube_ledger(api.url, on_change=lambda: None) as (ledger, watch):
        ledger.on_drift(lambda: woken.append(time.monotonic()))
        ledger.load()
        ledger.save(ASSIGNMENT)
        assert wait_until(lambda: watch.shards().get(SHOP) is not None, 5)
        damage(api, edit)
        assert wait_until(lambda: bool(woken), 5), "the leader was not told"
        assert ledger.dirty()
        ledger.save(ASSIGNMENT)  # what the loop does when woken
        assert not ledger.dirty()
    with kube_ledger(api.url) as (successor, _):
        assignment, problems = successor.load()
    assert problems == [] and plain(assignment) == plain(ASSIGNMENT)


@pytest.mark.parametrize("edit", ["delete", "corrupt", "edit-slots"])
def test_a_follower_keeps_the_last_good_copy_and_says_so(api: FakeKubeAPI, edit: str) -> None:
    with kube_ledger(api.url) as (leader, _):
        leader.load()
        leader.save(ASSIGNMENT)
    with kube_ledger(api.url) as (_, follower):
        assert wait_until(lambda: follower.current() is not None, 5)
        good = follower.current()
        assert good is not None and plain(good.assignment) == plain(ASSIGNMENT)
        name = damage(api, edit)
        assert wait_until(lambda: bool(follower.problems()), 5)
        (problem,) = follower.problems()
        assert name in problem and "serving the last good copy" in problem
        now = follower.current()
        assert now is not None and plain(now.assignment) == plain(ASSIGNMENT)
        follower.retain({SHOP, BLOG})  # still in use: kept
        assert SHOP in (follower.current() or now).assignment
        if edit == "delete":
            follower.retain({BLOG})  # the Service is gone too: forgotten, quietly
            assert follower.problems() == []


def legacy_configmap(text: str) -> dict[str, object]:
    obj = config_map(REF.name, REF.namespace)
    obj["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "peerplane"}
    obj["data"] = {SLOTS_KEY: text}
    return obj


# Written by the single-object ledger of earlier versions (ConfigMapSlotStore.save:
# compact JSON, sorted keys), as found in a cluster.
FORMAT_2 = (
    '{"backends":{"default_blog_http":{"count":42,"freed":[[3,1799999000.5,"127.0.2.9",80]],'
    '"slots":[["127.0.2.1",80,1],["127.0.2.2",80,2]]},"default_shop_http":{"count":42,'
    '"freed":[],"slots":[["127.0.1.2",8080,1],["127.0.1.1",8080,2]]}},"format":2}'
)
FORMAT_1 = (
    '{"backends":{"default_shop_http":{"count":4,"slots":[["127.0.1.2",8080,1],'
    '["127.0.1.1",8080,2]]}},"format":1}'
)


@pytest.mark.parametrize("text", [FORMAT_2, FORMAT_1], ids=["format-2", "format-1"])
def test_migration_from_the_single_configmap_moves_no_slot(api: FakeKubeAPI, text: str) -> None:
    api.apply(legacy_configmap(text))
    with kube_ledger(api.url, clock=lambda: 1_800_000_000.0) as (ledger, _):
        assignment, _problems = ledger.load()
        expected = plain(assignment)
        assert expected[SHOP][1] == {("127.0.1.2", 8080): 1, ("127.0.1.1", 8080): 2}
        ledger.save(assignment)
    legacy = api.get("ConfigMap", REF.namespace, REF.name)
    assert legacy is not None and legacy["data"][SLOTS_KEY] == text, "left as it was"
    assert legacy["metadata"]["annotations"][MIGRATED_ANNOTATION] == "shards"
    assert len(shards(api)) == len(expected)
    with kube_ledger(api.url) as (successor, _):  # from the shards now
        migrated, problems = successor.load()
    assert problems == [] and plain(migrated) == expected
    # A backend removed after the migration stays removed (the old object is not read).
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save({SHOP: migrated[SHOP]})
    with kube_ledger(api.url) as (successor, _):
        assert set(successor.load()[0]) == {SHOP}


def test_the_largest_possible_shard_fits_one_object(api: FakeKubeAPI) -> None:
    """A backend of MAX_SLOTS slots, all freed by the longest IPv6 endpoints: under the
    API's 1 MiB, so no shard ever needs splitting."""
    size = max_shard_bytes()
    assert size < MAX_OBJECT_BYTES * 0.8, size


def big_assignment(services: int, endpoints: int) -> SlotAssignment:
    """Pod addresses as a cluster has them (10.244.0.0/16)."""
    return {
        f"ns-{i % 50}_svc-{i}_http": BackendSlots(
            count=42,
            slots=MappingProxyType(
                {(f"10.244.{100 + i % 150}.{100 + e}", 8080): e + 1 for e in range(endpoints)}
            ),
        )
        for i in range(services)
    }


def test_the_single_object_ledger_is_refused_at_2000_services(api: FakeKubeAPI) -> None:
    """What earlier versions wrote: one ConfigMap of every backend. A real API server
    refuses it past ~1,650 Services x 20 endpoints; so does the fake one now."""
    text = json.dumps(
        assignment_to_json(big_assignment(2000, 20)), sort_keys=True, separators=(",", ":")
    )
    assert len(text) > MAX_OBJECT_BYTES
    core = __import__("kubernetes").client.CoreV1Api(api_client(api.url))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map(REF.namespace, legacy_configmap(text))
    assert refused.value.status == 422
    assert "[]: Too long: may not be more than 1048576 bytes" in str(refused.value.body)


def test_the_data_limit_counts_values_only_as_the_real_server_does(api: FakeKubeAPI) -> None:
    """The fake counted keys too (and binaryData's base64 text), refusing a ConfigMap a
    real server takes, in words it does not use (tests/realkube/test_ledger.py checks the
    same three objects against a real one)."""
    core = __import__("kubernetes").client.CoreV1Api(api_client(api.url))
    for name, obj in data_limit_objects().items():
        if name.endswith("past"):
            with pytest.raises(ApiException) as refused:
                core.create_namespaced_config_map(REF.namespace, obj)
            assert refused.value.status == 422
            message = json.loads(refused.value.body)["message"]
            assert message == (
                f'ConfigMap "{name}" is invalid: []: Too long: may not be more than 1048576 bytes'
            )
        else:
            core.create_namespaced_config_map(REF.namespace, obj)


def test_a_request_over_3_mib_is_refused_with_413(api: FakeKubeAPI) -> None:
    core = __import__("kubernetes").client.CoreV1Api(api_client(api.url))
    obj = legacy_configmap("x" * (3 * 1024 * 1024 + 10))
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map(REF.namespace, obj)
    assert refused.value.status == 413


def test_the_sharded_ledger_persists_10000_services_of_20_endpoints(api: FakeKubeAPI) -> None:
    assignment = big_assignment(10_000, 20)
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(assignment)
        assert ledger.largest_shard < 64 * 1024
        written = ledger.bytes_written
        one = dict(assignment)
        name = next(iter(one))
        old = one[name]
        one[name] = BackendSlots(old.count, MappingProxyType({**old.slots, ("10.9.9.9", 80): 21}))
        ledger.save(one)
        assert ledger.bytes_written - written < 16 * 1024, "one change, one small shard"
    with kube_ledger(api.url) as (successor, _):
        loaded, problems = successor.load()
    assert problems == [] and len(loaded) == 10_000 and loaded[name] == one[name]
