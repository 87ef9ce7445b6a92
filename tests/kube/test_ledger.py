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

from controlplane.kube.client import CONNECTION_POOL_SIZE
from controlplane.kube.events import EventRecorder
from controlplane.kube.ledger_store import PARALLEL_WRITES, ConfigMapLedger, LedgerReadError
from controlplane.kube.ledger_watch import LedgerWatch
from controlplane.ledger import shards as shards_module
from controlplane.ledger.codec import assignment_to_json
from controlplane.ledger.shards import (
    BULK_LABEL,
    HASH_KEY,
    LEDGER_LABEL,
    MAX_OBJECT_BYTES,
    MIGRATED_ANNOTATION,
    SLOTS_KEY,
    max_shard_bytes,
    shard_name,
)
from controlplane.ledger.store import LedgerWriteError
from controlplane.snapshot import BackendSlots, SlotAssignment
from controlplane.source.kinds import INPUT_KINDS
from tests.helpers.ledger import REF, data_limit_objects, kube_ledger
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import api_client, config_map

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
        wait_until(lambda: (BLOG, True) in seen, timeout=10)  # the delete came last
        assert seen == [(SHOP, False), (BLOG, False), (BLOG, False), (BLOG, True)]
        assert drifts == [] and not ledger.dirty()
        ledger.save({SHOP: ASSIGNMENT[SHOP]})
        assert len(writes(api)) == before


def test_the_echo_of_the_leaders_own_write_is_not_parsed_again(
    api: FakeKubeAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first start at 8,000 Services parsed each of the 8,000 shards the leader had just
    written again as its echo came back (4.8 s of CPU beside the writes, in the profile of
    2026-12-05). A signed shard with the hash of the leader's latest write of that backend
    holds exactly those slots: the watch takes them as they are; a shard someone else
    wrote is still read from its text."""
    parsed: list[object] = []
    real = shards_module.assignment_from_json

    def counted(data: object, now: float) -> tuple[SlotAssignment, list[str]]:
        parsed.append(data)
        return real(data, now)

    monkeypatch.setattr(shards_module, "assignment_from_json", counted)
    with kube_ledger(api.url) as (ledger, watch):
        ledger.load()
        ledger.save(ASSIGNMENT)
        wait_until(lambda: set(watch.shards()) == {SHOP, BLOG}, 5)
        assert parsed == []
        view = watch.current()
        assert view is not None and view.assignment[SHOP] is ASSIGNMENT[SHOP]
        assert all(s.signed and not s.problem for s in watch.shards().values())
        damage(api, "edit-slots")  # signed, another hash: someone else's, read from its text
        wait_until(lambda: len(parsed) == 1, 5)
        assert watch.shards()[SHOP].slots != ASSIGNMENT[SHOP]


def test_the_connection_pool_holds_every_watch_and_the_concurrent_shard_writes() -> None:
    """Past the client's pool a request opens a new connection (a TLS handshake each): a
    first start's concurrent shard writes (32 at once since 2026-12-05: 8,000 creates at 8
    took ~70 s against a loaded real API server) must fit beside every informer's watch,
    the ledger's two watches, the Lease, Events and route status writes."""
    watches = len(INPUT_KINDS) + 2
    assert PARALLEL_WRITES >= 32
    assert watches + PARALLEL_WRITES + 3 <= CONNECTION_POOL_SIZE


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


def test_a_replica_that_stops_leading_mid_save_never_overwrites_the_new_leaders_shard(
    api: FakeKubeAPI,
) -> None:
    """A save that started while leading and lost the Lease before its write (a replica
    paused past its Lease): the 409 on its stale resourceVersion used to be answered by a
    re-read and an overwrite of the new leader's shard. Now every request asks whether
    this replica still leads, and the one that no longer does writes and deletes nothing."""
    grown = {SHOP: BackendSlots(43, ASSIGNMENT[SHOP].slots)}
    asked: list[bool] = []
    with kube_ledger(api.url) as (stale, _):
        stale.load()
        stale.save(ASSIGNMENT)
        api.hold_watches()  # paused: it does not see the new leader's write
        name = shard_name(REF.name, SHOP)
        theirs = api.get("ConfigMap", REF.namespace, name)
        assert theirs is not None
        theirs["data"]["writer"] = "new-leader"
        written = api.apply(theirs)

        def leading() -> bool:  # leading at the first write, not after its 409
            asked.append(not asked)
            return asked[-1]

        stale.write_only_while(leading)
        with pytest.raises(LedgerWriteError) as raised:
            stale.save(grown)  # also deletes BLOG's shard: not while not leading
        assert raised.value.cause == "not-leading" and not raised.value.permanent
        assert "no longer leads" in str(raised.value)
        assert asked[:2] == [True, False]
        api.release_watches()
    assert api.get("ConfigMap", REF.namespace, name) == written
    assert api.get("ConfigMap", REF.namespace, shard_name(REF.name, BLOG)) is not None


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
        wait_until(lambda: watch.shards().get(SHOP) is not None, 5)
        damage(api, edit)
        wait_until(lambda: bool(woken), 5, message="the leader was not told")
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
        wait_until(lambda: follower.current() is not None, 5)
        good = follower.current()
        assert good is not None and plain(good.assignment) == plain(ASSIGNMENT)
        name = damage(api, edit)
        wait_until(lambda: bool(follower.problems()), 5)
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


def bulk_objects(api: FakeKubeAPI) -> dict[str, dict[str, object]]:
    return {
        o["metadata"]["name"]: o
        for o in api.list("ConfigMap")
        if (o["metadata"].get("labels") or {}).get(BULK_LABEL) == REF.name
    }


def save_until_shards(ledger: ConfigMapLedger, assignment: SlotAssignment) -> int:
    """Save as the loop does while the ledger says it has work (bulk to shards); saves."""
    saves = 0
    while ledger.dirty():
        ledger.save(assignment)
        saves += 1
        assert saves < 100
    return saves


def test_the_sharded_ledger_persists_10000_services_of_20_endpoints(api: FakeKubeAPI) -> None:
    assignment = big_assignment(10_000, 20)
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(assignment)
        assert 0 < len(bulk_objects(api)) <= 40 and shards(api) == {}
        save_until_shards(ledger, assignment)
        assert bulk_objects(api) == {} and len(shards(api)) == 10_000
        ledger.largest_shard = 0
        written = ledger.bytes_written
        one = dict(assignment)
        name = next(iter(one))
        old = one[name]
        one[name] = BackendSlots(old.count, MappingProxyType({**old.slots, ("10.9.9.9", 80): 21}))
        ledger.save(one)
        assert ledger.largest_shard < 64 * 1024
        assert ledger.bytes_written - written < 16 * 1024, "one change, one small shard"
    with kube_ledger(api.url, read_timeout=30.0) as (successor, _):
        loaded, problems = successor.load()
    assert problems == [] and len(loaded) == 10_000 and loaded[name] == one[name]


def test_a_first_save_of_many_backends_is_a_few_bulk_objects_read_by_every_replica(
    api: FakeKubeAPI,
) -> None:
    """A first start's 2,000 backends: a few creates, not 2,000, before the first
    publication; a follower (and a new leader) reads every backend from them."""
    assignment = big_assignment(2_000, 20)
    with kube_ledger(api.url) as (ledger, _), kube_ledger(api.url) as (_, follower):
        ledger.load()
        before = len(writes(api))
        ledger.save(assignment)
        assert len(writes(api)) - before <= 8, "bulk objects, not one create per backend"
        assert shards(api) == {} and ledger.dirty()
        wait_until(lambda: plain(current(follower)) == plain(assignment))
        save_until_shards(ledger, assignment)
        assert len(shards(api)) == 2_000 and bulk_objects(api) == {}
        # Shards and bulk objects come on two watches: a follower may see a bulk object's
        # delete before some of its shards, and says so (serving the last good copy)
        # until they arrive.
        wait_until(lambda: follower.bulks() == {} and follower.problems() == [])
        assert plain(current(follower)) == plain(assignment)


def test_bulk_objects_become_shards_only_after_the_first_loads_delay(api: FakeKubeAPI) -> None:
    """The publication after a bulk write is the agents' first load of those backends:
    the conversion's creates wait `convert_delay` per backend (300 x 10 ms: 3 s here),
    the loop is woken when it is over, and a backend changed meanwhile is its shard at
    once (persist before publish does not wait)."""
    now = [1000.0]
    woken: list[float] = []
    assignment = big_assignment(300, 3)
    name = sorted(assignment)[0]
    with kube_ledger(api.url, convert_delay=0.01, convert_clock=lambda: now[0]) as (ledger, watch):
        ledger.on_drift(lambda: woken.append(time.monotonic()))
        ledger.load()
        written = time.monotonic()
        ledger.save(assignment)
        creates = len(writes(api))
        assert not ledger.dirty(), "nothing to write before the delay"
        ledger.save(assignment)
        moved = dict(assignment)
        moved[name] = BackendSlots(42, MappingProxyType({("10.9.9.9", 80): 7}))
        ledger.save(moved)
        assert len(writes(api)) == creates + 1 and set(shards(api)) == {
            shard_name(REF.name, name)
        }, "only the changed backend, as its shard"
        now[0] += 2.9
        assert not ledger.dirty() and not woken
        now[0] += 0.2
        assert ledger.dirty()
        wait_until(lambda: woken, timeout=10)
        assert woken[0] - written >= 2.9, "the loop woken once the delay is over"
        save_until_shards(ledger, moved)
        assert len(shards(api)) == 300 and bulk_objects(api) == {}
        wait_until(lambda: plain(current(watch)) == plain(moved))


def current(watch: LedgerWatch) -> SlotAssignment:
    view = watch.current()
    return dict(view.assignment) if view is not None else {}


def test_a_leader_lost_before_the_shards_leaves_the_same_slots_to_the_next(
    api: FakeKubeAPI,
) -> None:
    """Persist before publish holds across the bulk step: the bulk objects are the
    ledger until every backend is a shard; a new leader continues them and finishes."""
    assignment = big_assignment(600, 5)
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(assignment)  # published from here on; then the leader dies
    assert bulk_objects(api) and shards(api) == {}
    with kube_ledger(api.url) as (successor, _):
        loaded, problems = successor.load()
        assert problems == [] and plain(loaded) == plain(assignment)
        assert successor.dirty()
        save_until_shards(successor, loaded)
    assert len(shards(api)) == 600 and bulk_objects(api) == {}
    with kube_ledger(api.url) as (third, _):
        assert plain(third.load()[0]) == plain(assignment)


def test_a_backend_changed_while_in_bulk_is_written_as_its_shard_and_wins(
    api: FakeKubeAPI,
) -> None:
    assignment = big_assignment(300, 3)
    name = sorted(assignment)[-1]  # the last to be converted
    with kube_ledger(api.url) as (ledger, watch):
        ledger.load()
        ledger.save(assignment)
        moved = dict(assignment)
        moved[name] = BackendSlots(42, MappingProxyType({("10.9.9.9", 80): 7}))
        ledger.save(moved)
        assert shard_name(REF.name, name) in shards(api)
        wait_until(lambda: current(watch).get(name) == moved[name])
    with kube_ledger(api.url) as (successor, _):  # the bulk copy is not read for it
        assert successor.load()[0][name] == moved[name]


def test_a_bulk_object_deleted_by_hand_is_written_again_as_shards(api: FakeKubeAPI) -> None:
    assignment = big_assignment(300, 3)
    drifted: list[int] = []
    with (
        kube_ledger(api.url) as (ledger, _),
        kube_ledger(api.url) as (_, follower),
    ):
        ledger.on_drift(lambda: drifted.append(1))
        ledger.load()
        ledger.save(assignment)
        wait_until(lambda: plain(current(follower)) == plain(assignment))
        for bulk in bulk_objects(api):
            api.delete("ConfigMap", REF.namespace, bulk)
        wait_until(lambda: drifted)
        wait_until(lambda: follower.bulks() == {})
        assert plain(current(follower)) == plain(assignment), "kept copies"
        assert any("bulk object" in p for p in follower.problems())
        save_until_shards(ledger, assignment)
        assert len(shards(api)) == 300
    with kube_ledger(api.url) as (successor, _):
        assert plain(successor.load()[0]) == plain(assignment)


def test_an_edited_bulk_object_is_not_read_and_its_backends_become_shards(
    api: FakeKubeAPI,
) -> None:
    """Two slots swapped by hand in a bulk object (its hash no longer matches): followers
    keep its last good content and say so; the leader writes those backends as shards."""
    assignment = big_assignment(300, 3)
    with kube_ledger(api.url) as (ledger, _), kube_ledger(api.url) as (_, follower):
        drifted: list[int] = []
        ledger.on_drift(lambda: drifted.append(1))
        ledger.load()
        ledger.save(assignment)
        wait_until(lambda: plain(current(follower)) == plain(assignment))
        name = sorted(bulk_objects(api))[0]
        obj = api.get("ConfigMap", REF.namespace, name)
        assert obj is not None
        doc = json.loads(obj["data"][shards_module.BULK_KEY])
        backend = sorted(doc["backends"])[0]
        doc["backends"][backend]["slots"] = [["10.9.9.9", 80, 1]]
        obj["data"][shards_module.BULK_KEY] = json.dumps(doc)
        api.apply(obj)
        wait_until(lambda: any(name in p for p in follower.problems()))
        assert plain(current(follower)) == plain(assignment), "the last good content"
        wait_until(lambda: drifted)
        save_until_shards(ledger, assignment)
        assert shard_name(REF.name, backend) in shards(api) and bulk_objects(api) == {}
    with kube_ledger(api.url) as (successor, _):
        assert plain(successor.load()[0]) == plain(assignment)


def test_every_bulk_object_stays_under_the_apis_limit() -> None:
    """Bulk objects are packed to BULK_BYTES and a backend is never split: one as large as
    a backend can be goes alone and still fits (the fake API server refuses past 1 MiB)."""
    name, largest, writer = shards_module.largest_shard()
    assignment = {**big_assignment(3_000, 20), name: largest, "a_" + name[2:]: largest}
    groups = shards_module.pack_bulks(assignment)
    assert sorted(b for names, _ in groups for b in names) == sorted(assignment)
    for names, text in groups:
        data, _ = shards_module.bulk_data(text, writer)
        assert shards_module.shard_bytes(data) < MAX_OBJECT_BYTES
        assert len(text) <= shards_module.BULK_BYTES or len(names) == 1


GROWN: SlotAssignment = {  # an endpoint added since the copy was made
    **ASSIGNMENT,
    SHOP: BackendSlots(
        count=42,
        slots=MappingProxyType({**ASSIGNMENT[SHOP].slots, ("127.0.1.3", 8080): 3}),
    ),
}


def stray_copy(api: FakeKubeAPI, name: str, data: dict[str, str] | None = None) -> None:
    """A signed copy of the shop shard (as it is now, or `data` saved from it earlier)
    under `name` with the ledger label: a restored backup, a renamed copy."""
    canonical = api.get("ConfigMap", REF.namespace, shard_name(REF.name, SHOP))
    assert canonical is not None
    copy = config_map(name, REF.namespace)
    copy["metadata"]["labels"] = dict(canonical["metadata"]["labels"])
    copy["data"] = dict(data if data is not None else canonical["data"])
    api.apply(copy)


STRAY = f"{shard_name(REF.name, SHOP)}.bak"


def test_a_restarted_follower_serves_the_shard_not_a_stale_copy_under_another_name(
    api: FakeKubeAPI,
) -> None:
    """A signed copy of a shard saved earlier under another name was taken as the
    backend's good copy when it came last (a list's objects reach the watch in no set
    order): a restarted follower served stale slots (an endpoint added since was
    missing) and said nothing. Only the canonical name is read; the copy is reported,
    once, and left alone."""
    with kube_ledger(api.url) as (leader, _):
        leader.load()
        leader.save(ASSIGNMENT)
        stray_copy(api, STRAY)
        leader.save(GROWN)
    told: list[tuple[str, str, str]] = []
    with kube_ledger(api.url, on_stray=lambda *said: told.append(said)) as (_, follower):
        wait_until(lambda: follower.current() is not None, 5)
        view = follower.current()
        assert view is not None and plain(view.assignment) == plain(GROWN)
        assert set(follower.shards()) == {SHOP, BLOG}
        assert follower.shards()[SHOP].name == shard_name(REF.name, SHOP)
        (problem,) = follower.problems()
        assert STRAY in problem and "not read" in problem
        assert told == [(REF.namespace, STRAY, problem)]
    assert STRAY in shards(api), "an operator's copy is not deleted"


def test_a_stale_copy_arriving_after_the_shard_does_not_win(api: FakeKubeAPI) -> None:
    """The same copy restored while a follower runs: its watch event comes after the
    canonical shard's, and was taken (signed, so "a leader wrote it")."""
    with kube_ledger(api.url) as (leader, _):
        leader.load()
        leader.save(ASSIGNMENT)
        saved = api.get("ConfigMap", REF.namespace, shard_name(REF.name, SHOP))
        assert saved is not None
        leader.save(GROWN)
        with kube_ledger(api.url) as (_, follower):
            wait_until(lambda: follower.current() is not None, 5)
            stray_copy(api, STRAY, saved["data"])
            wait_until(lambda: bool(follower.problems()), 5)
            view = follower.current()
            assert view is not None and plain(view.assignment) == plain(GROWN)
            api.delete("ConfigMap", REF.namespace, STRAY)
            wait_until(lambda: follower.problems() == [], 5, message="gone: not reported")
            assert follower.current() is not None


def test_the_leader_neither_continues_nor_rewrites_a_stray_copy(api: FakeKubeAPI) -> None:
    """A restarted leader continues the canonical shards (not the copy), sees no drift
    when the copy changes, and never writes or deletes it."""
    stray = STRAY
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        stray_copy(api, stray)
        ledger.save(GROWN)
    drifts: list[int] = []
    with kube_ledger(api.url) as (ledger, watch):
        ledger.on_drift(lambda: drifts.append(1))
        assignment, problems = ledger.load()
        assert plain(assignment) == plain(GROWN)
        assert len(problems) == 1 and stray in problems[0]
        seen: list[str] = []
        watch.on_shard(lambda backend, shard: seen.append(backend))
        before = len(writes(api))
        ledger.save(GROWN)
        assert len(writes(api)) == before, "nothing changed: nothing written"
        edited = api.get("ConfigMap", REF.namespace, stray)
        assert edited is not None
        edited["data"][SLOTS_KEY] = "{not json"  # the copy edited: still not the leader's
        api.apply(edited)
        ledger.save(ASSIGNMENT)  # an event the watch delivers after the copy's
        wait_until(lambda: SHOP in seen, 5)
        assert seen == [SHOP], "the copy is never shown to the leader"
        assert drifts == [] and not ledger.dirty()
        assert [p for _, p in writes(api)[before:] if stray in p] == []
    assert stray in shards(api)


def test_a_labelled_object_that_is_no_shard_is_reported_and_ignored(api: FakeKubeAPI) -> None:
    odd = config_map("peerplane-slots-notes", REF.namespace)
    odd["metadata"]["labels"] = {LEDGER_LABEL: REF.name}
    odd["data"] = {"readme": "kept by hand"}
    api.apply(odd)
    with kube_ledger(api.url) as (ledger, watch):
        assignment, problems = ledger.load()
        assert assignment == {}
        assert len(problems) == 1 and "peerplane-slots-notes" in problems[0]
        assert "key backend is missing" in problems[0]
        api.delete("ConfigMap", REF.namespace, "peerplane-slots-notes")
        wait_until(lambda: watch.problems() == [], 5, message="gone: no longer reported")


def test_a_stray_copy_is_a_warning_event_on_it(api: FakeKubeAPI) -> None:
    stray = STRAY
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
        stray_copy(api, stray)
    recorder = EventRecorder(api_client(api.url), host="cp-0")
    try:
        with kube_ledger(api.url, on_stray=recorder.ledger_stray) as (_, watch):
            wait_until(lambda: bool(watch.problems()), 5)
            assert recorder.flush()
    finally:
        recorder.close()
    (event,) = api.list("Event")
    assert event["reason"] == "SlotLedgerObjectIgnored" and event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "ConfigMap"
    assert event["involvedObject"]["name"] == stray
    assert shard_name(REF.name, SHOP) in event["message"]


def test_a_save_since_the_last_compares_the_touched_and_the_drifted_backends_only(
    api: FakeKubeAPI,
) -> None:
    """At 8,000 backends comparing each with the saved one was a Python loop per change:
    a save told what the computation touched since the assignment it saved last compares
    those (here a backend it was not told of differs and is not written: the proof it
    was not looked at) and the shards that drifted, which it still writes back."""
    with kube_ledger(api.url, on_change=lambda: None) as (ledger, watch):
        ledger.on_drift(lambda: None)
        ledger.load()
        ledger.save(ASSIGNMENT)
        wait_until(lambda: watch.shards().get(SHOP) is not None, 5)
        before = len(writes(api))
        moved = {
            SHOP: BackendSlots(42, MappingProxyType({("127.0.1.9", 8080): 1})),  # not told
            BLOG: BackendSlots(42, MappingProxyType({("127.0.2.1", 80): 1})),
        }
        ledger.save(moved, since=(ASSIGNMENT, {BLOG}))
        assert [(m, shard_name(REF.name, BLOG) in p) for m, p in writes(api)[before:]] == [
            ("PUT", True)
        ]
        damage(api, "delete")  # SHOP's shard
        wait_until(ledger.dirty, 5, message="the leader was not told")
        ledger.save(moved, since=(moved, set()))
        assert not ledger.dirty()
    with kube_ledger(api.url) as (successor, _):
        assignment, _ = successor.load()
    assert plain(assignment)[SHOP] == plain(moved)[SHOP]


class _CountedKeys(dict[str, object]):
    """A mapping that counts how often all its keys were asked for."""

    asked = 0

    def keys(self):  # type: ignore[override]
        _CountedKeys.asked += 1
        return super().keys()


def test_a_save_since_the_last_looks_for_stale_shards_among_the_told_backends_only(
    api: FakeKubeAPI,
) -> None:
    """Every save took the difference of every shard present and the assignment (8,000
    keys a change) to find shards to delete: a save after a whole one looks among the
    backends it was told of, the drifted ones and the shards no save of ours wrote, and
    still deletes a removed backend's shard and a shard that appeared by another hand."""
    with kube_ledger(api.url, on_change=lambda: None) as (ledger, watch):
        ledger.on_drift(lambda: None)
        ledger.load()
        ledger.save(ASSIGNMENT)
        wait_until(lambda: watch.shards().get(BLOG) is not None, 5)
        blog_shard = shards(api)[shard_name(REF.name, BLOG)]
        ledger._present = _CountedKeys(ledger._present)
        asked = _CountedKeys.asked
        only_shop = {SHOP: ASSIGNMENT[SHOP]}
        ledger.save(only_shop, since=(ASSIGNMENT, {BLOG}))
        assert _CountedKeys.asked == asked  # not every shard
        assert set(shards(api)) == {shard_name(REF.name, SHOP)}
        # BLOG's shard written again by another hand: a backend the leader does not hold
        metadata = blog_shard["metadata"]
        again = {
            **blog_shard,
            "metadata": {k: metadata[k] for k in ("name", "namespace", "labels")},
        }
        api.apply(again)
        wait_until(lambda: BLOG in ledger._present, 5, message="the stray shard not seen")
        ledger.save(only_shop, since=(only_shop, set()))
        assert _CountedKeys.asked == asked
        assert set(shards(api)) == {shard_name(REF.name, SHOP)}


def test_a_shard_found_at_load_that_holds_no_backend_is_deleted_by_a_save_since(
    api: FakeKubeAPI,
) -> None:
    """A shard present at load but not in the loaded assignment (unreadable, no earlier
    copy) is a candidate of the first save after it, as when every shard was compared."""
    with kube_ledger(api.url) as (ledger, _):
        ledger.load()
        ledger.save(ASSIGNMENT)
    damage_name = shard_name(REF.name, BLOG)
    broken = shards(api)[damage_name]
    broken["data"] = {**broken["data"], SLOTS_KEY: "{not json"}
    api.apply(broken)
    with kube_ledger(api.url, on_change=lambda: None) as (ledger, _):
        loaded, _ = ledger.load()
        assert BLOG not in loaded
        ledger.save(loaded, since=(loaded, set()))
        assert damage_name not in shards(api)
