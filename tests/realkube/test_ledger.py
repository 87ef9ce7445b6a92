"""The sharded slot ledger on the real API server, written with the control plane's own
token under the shipped Role: one ConfigMap shard per backend created on its first
assignment, a write that crosses someone else's (409 Conflict or AlreadyExists) read again
and rewritten, the largest possible shard taken and one past the 1 MiB limit refused (by
the ledger before it is sent, and by the server when sent), and the shards two `serve`
replicas share repaired by the leader when deleted or edited by hand while the follower
keeps its slots. The fake-server versions: tests/kube/test_ledger.py, test_replicas.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controlplane.kube import ledger_store
from controlplane.kube.events import EventRecorder
from controlplane.ledger.shards import (
    BULK_LABEL,
    HASH_KEY,
    LEDGER_LABEL,
    MAX_OBJECT_BYTES,
    SLOTS_KEY,
    largest_shard,
    max_shard_bytes,
    shard_bytes,
    shard_data,
    shard_name,
)
from controlplane.ledger.store import LedgerWriteError
from controlplane.model import ObjectRef
from controlplane.snapshot import BackendSlots, SlotAssignment
from tests.helpers.cluster import RealCluster
from tests.helpers.cluster_serve import (
    CONTROLPLANE_NS,
    HAPROXY_SELECTOR,
    backend_name,
    endpoint_slice,
    exposed_service,
    forbidden,
    free_lease,
    leader_and_follower,
    own_namespace,
    serve_args,
    served,
)
from tests.helpers.ledger import REF, data_limit_objects, ledger_on
from tests.helpers.replicas import StreamAgent, health, replica_of, role_of, slot_history
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until

SHOP, BLOG = "rk-ledger_shop_http", "rk-ledger_blog_http"
ASSIGNMENT: SlotAssignment = {
    SHOP: BackendSlots(
        count=42, slots=MappingProxyType({("10.0.1.2", 8080): 1, ("10.0.1.1", 8080): 2})
    ),
    BLOG: BackendSlots(count=42, slots=MappingProxyType({})),
}
GROWN: SlotAssignment = {name: BackendSlots(43, s.slots) for name, s in ASSIGNMENT.items()}
# A former leader's copy of SHOP: signed, but not what this ledger holds.
FORMER = BackendSlots(42, MappingProxyType({("10.0.1.9", 8080): 1}))
LEASE_S = 4.0


def plain(assignment: SlotAssignment) -> dict[str, tuple[int, dict[tuple[str, int], int]]]:
    return {name: (b.count, dict(b.slots)) for name, b in assignment.items()}


@pytest.fixture
def ref(installed: RealCluster) -> Iterator[ObjectRef]:
    """A ledger of the test's own in haproxy-system (its shards deleted on the way out)."""
    own = ObjectRef(CONTROLPLANE_NS, f"rk-ledger-{uuid.uuid4().hex[:6]}")
    yield own
    core = client.CoreV1Api(installed.api_client())
    for label in (LEDGER_LABEL, BULK_LABEL):
        core.delete_collection_namespaced_config_map(
            CONTROLPLANE_NS, label_selector=f"{label}={own.name}"
        )


@pytest.fixture
def api(installed: RealCluster, controlplane_kubeconfig: Path) -> client.ApiClient:
    """The control plane's client: its ServiceAccount token, the shipped RBAC."""
    return installed.api_client(controlplane_kubeconfig)


def shards(cluster: RealCluster, ref: ObjectRef) -> dict[str, Any]:
    core = client.CoreV1Api(cluster.api_client())
    found = core.list_namespaced_config_map(
        ref.namespace, label_selector=f"{LEDGER_LABEL}={ref.name}"
    ).items
    return {c.metadata.name: c for c in found}


def former_leaders_shard(ref: ObjectRef) -> dict[str, Any]:
    data, _ = shard_data(SHOP, FORMER, "former-leader")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": shard_name(ref.name, SHOP),
            "namespace": ref.namespace,
            "labels": {LEDGER_LABEL: ref.name},
        },
        "data": data,
    }


def test_shards_are_created_on_first_assignment_and_read_back(
    installed: RealCluster, api: client.ApiClient, ref: ObjectRef
) -> None:
    with ledger_on(api, ref) as (ledger, _):
        assert ledger.load() == ({}, [])
        ledger.save(ASSIGNMENT)
        found = shards(installed, ref)
        assert set(found) == {shard_name(ref.name, SHOP), shard_name(ref.name, BLOG)}
        shop = found[shard_name(ref.name, SHOP)]
        assert shop.metadata.labels["app.kubernetes.io/managed-by"] == "peerplane"
        assert shop.data["backend"] == SHOP
        ledger.save({SHOP: GROWN[SHOP]})  # one backend changed, the other gone: deleted
        assert set(shards(installed, ref)) == {shard_name(ref.name, SHOP)}
    with ledger_on(api, ref) as (successor, _):  # a new leader reads them back
        assignment, problems = successor.load()
    assert problems == [] and plain(assignment) == {SHOP: plain(GROWN)[SHOP]}


@pytest.mark.parametrize("meanwhile", ["updated", "created"])
def test_a_write_crossing_someone_elses_is_read_again_and_rewritten(
    installed: RealCluster,
    api: client.ApiClient,
    ref: ObjectRef,
    meanwhile: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch is stopped first, so the ledger learns of the other write only from the
    server's 409 (Conflict on a stale resourceVersion, AlreadyExists on a create): the
    race a leader loses when its write crosses the watch event."""
    admin = client.CoreV1Api(installed.api_client())
    with ledger_on(api, ref) as (ledger, watch):
        ledger.load()
        if meanwhile == "updated":
            ledger.save(ASSIGNMENT)
            wait_until(lambda: watch.shards().get(SHOP) is not None, 10)
        watch.stop()
        other = former_leaders_shard(ref)
        if meanwhile == "updated":
            admin.replace_namespaced_config_map(other["metadata"]["name"], ref.namespace, other)
        else:
            admin.create_namespaced_config_map(ref.namespace, other)
        reread: list[str] = []
        version_of = ledger._version_of

        def spy(name: str) -> str:
            reread.append(name)
            return version_of(name)

        monkeypatch.setattr(ledger, "_version_of", spy)
        ledger.save(GROWN)
        assert reread == [shard_name(ref.name, SHOP)], "one 409, that shard read again"
    with ledger_on(api, ref) as (successor, _):
        assignment, problems = successor.load()
    assert problems == [] and plain(assignment) == plain(GROWN)


def test_the_largest_possible_shard_is_taken_by_the_server(
    api: client.ApiClient, ref: ObjectRef
) -> None:
    """MAX_SLOTS slots all freed by the longest IPv6 endpoints, the longest names: under
    1 MiB (and etcd's request limit), so no shard the control plane computes is refused."""
    name, slots, writer = largest_shard()
    with ledger_on(api, ref, writer=writer) as (ledger, _):
        ledger.load()
        ledger.save({name: slots})
        assert ledger.largest_shard == max_shard_bytes()
    # 10,000 freed slots to read back and parse: more than 5 s on a loaded host
    with ledger_on(api, ref, read_timeout=30.0) as (successor, _):
        assignment, problems = successor.load()
    assert problems == []
    assert dict(assignment[name].freed_by) == dict(slots.freed_by)


def test_a_first_save_of_many_backends_goes_in_bulk_then_shards_under_the_shipped_role(
    installed: RealCluster, api: client.ApiClient, ref: ObjectRef
) -> None:
    """600 new backends, two of them as large as a backend can be: a few bulk objects
    (each under the server's 1 MiB, the largest backends alone) that a new leader reads
    back, then one shard per backend and no bulk object left."""
    name, largest, writer = largest_shard()
    assignment: SlotAssignment = {
        f"rk-bulk-{i}_svc_http": BackendSlots(
            42, MappingProxyType({(f"10.0.{i // 200}.{i % 200 + 1}", 8080): 1})
        )
        for i in range(598)
    }
    assignment[name] = largest
    assignment["a" + name[1:]] = largest
    core = client.CoreV1Api(installed.api_client())

    def bulk_objects() -> int:
        return len(
            core.list_namespaced_config_map(
                ref.namespace, label_selector=f"{BULK_LABEL}={ref.name}"
            ).items
        )

    with ledger_on(api, ref, writer=writer) as (ledger, _):
        ledger.load()
        ledger.save(assignment)
        assert 3 <= bulk_objects() <= 8 and shards(installed, ref) == {}
    # two backends of 10,000 freed slots each to parse: more than 5 s on a loaded host
    with ledger_on(api, ref, writer=writer, read_timeout=30.0) as (successor, _):
        loaded, problems = successor.load()
        assert problems == [] and plain(loaded) == plain(assignment)
        saves = 0
        while successor.dirty():
            successor.save(loaded)
            saves += 1
            assert saves < 20
    assert len(shards(installed, ref)) == 600 and bulk_objects() == 0


def test_a_shard_past_1_mib_is_refused_and_said_on_the_shard(
    installed: RealCluster,
    api: client.ApiClient,
    ref: ObjectRef,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shard past 1 MiB cannot come from a computation (twice MAX_SLOTS slots here): if
    one did, the ledger refuses it before sending (permanent, `too-large`) and the
    operator sees a Warning Event SlotLedgerWriteRefused on the shard's name in
    haproxy-system. Sent anyway, the server refuses it too: 422 Invalid, "Too long",
    which the ledger names as permanent (`invalid`) in the server's words."""
    name, slots, _ = largest_shard(count=20_000)
    size = shard_bytes(shard_data(name, slots, "test")[0])
    assert MAX_OBJECT_BYTES < size < 3 * MAX_OBJECT_BYTES, size  # under the 3 MiB request limit
    recorder = EventRecorder(api, interval=600.0, host="rk-ledger")
    try:
        with ledger_on(api, ref, refused=recorder.ledger_refused) as (ledger, _):
            ledger.load()
            with pytest.raises(LedgerWriteError) as refused:
                ledger.save({name: slots})
            assert (refused.value.permanent, refused.value.cause) == (True, "too-large")
            assert f"limit {MAX_OBJECT_BYTES}" in str(refused.value)
            assert shards(installed, ref) == {}, "nothing was sent"

            assert recorder.flush()
            core = client.CoreV1Api(installed.api_client())
            events = core.list_namespaced_event(
                CONTROLPLANE_NS,
                field_selector=f"involvedObject.name={shard_name(ref.name, name)}",
            ).items
            (event,) = events
            assert (event.type, event.reason) == ("Warning", "SlotLedgerWriteRefused")
            assert event.involved_object.kind == "ConfigMap"
            assert "bytes (limit 1048576)" in event.message

            monkeypatch.setattr(ledger_store, "MAX_OBJECT_BYTES", 3 * MAX_OBJECT_BYTES)
            with pytest.raises(LedgerWriteError) as invalid:
                ledger.save({name: slots})
            assert (invalid.value.permanent, invalid.value.cause) == (True, "invalid")
            assert "HTTP 422" in str(invalid.value)
            assert "Too long: may not be more than 1048576 bytes" in str(invalid.value)
            assert shards(installed, ref) == {}
    finally:
        recorder.close()


def test_the_data_limit_counts_values_only(installed: RealCluster) -> None:
    """What the fake server now enforces (tests/kube/test_ledger.py), on a real one: a
    1 MiB value under a key is taken, binaryData counts decoded, 1 MiB + 1 is refused."""
    core = client.CoreV1Api(installed.api_client())
    with own_namespace(installed, "rk-ledger") as ns:
        for name, obj in data_limit_objects().items():
            if name.endswith("past"):
                with pytest.raises(ApiException) as refused:
                    core.create_namespaced_config_map(ns, obj)
                assert refused.value.status == 422
                message = json.loads(refused.value.body)["message"]
                assert message == (
                    f'ConfigMap "{name}" is invalid: []: Too long: may not be more than '
                    "1048576 bytes"
                )
            else:
                core.create_namespaced_config_map(ns, obj)


def swap_two_slots(text: str, a: str, b: str) -> str:
    return text.replace(a, "X").replace(b, a).replace("X", b)


@pytest.mark.parametrize("damage", ["delete", "swap-two-slots"])
def test_a_shard_damaged_by_hand_is_rewritten_by_the_leader_and_the_follower_keeps_its_slots(
    installed: RealCluster, controlplane_kubeconfig: Path, damage: str
) -> None:
    free_lease(installed)
    args = serve_args(controlplane_kubeconfig, lease_s=LEASE_S)
    with (
        own_namespace(installed, "rk-ledger") as ns,
        ServeProcess(*args) as a,
        ServeProcess(*args) as b,
    ):
        backend = backend_name(ns, "shop")
        installed.apply(exposed_service(ns, "shop", ("10.0.2.1", "10.0.2.2")))
        leader, follower = leader_and_follower(a, b)
        pod = installed.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR)[0].metadata.name
        agent = StreamAgent(follower.address, pod=pod, backend=backend)
        try:
            wait_until(lambda: len(agent.last().slots) == 2, 15, message=lambda: agent.ended)
            held = agent.last().slots
            name = shard_name(REF.name, backend)
            core = client.CoreV1Api(installed.api_client())
            shard = core.read_namespaced_config_map(name, CONTROLPLANE_NS)
            written = shard.data[SLOTS_KEY]
            if damage == "delete":
                core.delete_namespaced_config_map(name, CONTROLPLANE_NS)
            else:
                edited = swap_two_slots(written, "10.0.2.1", "10.0.2.2")
                assert edited != written
                core.patch_namespaced_config_map(
                    name, CONTROLPLANE_NS, {"data": {SLOTS_KEY: edited}}
                )

            def rewritten() -> bool:
                try:
                    now = core.read_namespaced_config_map(name, CONTROLPLANE_NS)
                except ApiException:
                    return False
                return bool(now.data[SLOTS_KEY] == written)

            wait_until(rewritten, 15, message=lambda: leader.lines[-10:])
            what = "deleted" if damage == "delete" else "edited"
            leader.wait_for(re.compile(rf"slot ledger shard for {re.escape(backend)} {what}"))
            if damage != "delete":  # a deletion repaired within the debounce goes unsaid
                follower.wait_for(re.compile(r"slot ledger: shard " + re.escape(name)))
            wait_until(lambda: replica_of(follower.address).replica.ledger_problems == [], 15)
            repaired = core.read_namespaced_config_map(name, CONTROLPLANE_NS).data
            assert repaired[HASH_KEY] == hashlib.sha256(written.encode()).hexdigest(), "signed"
            assert agent.last().slots == held, "the follower's slots never changed"
            assert slot_history([agent]) == {addr: {s} for s, addr in held.items()}
            assert agent.ended is None
            assert served(leader.address, backend)[1] == held
        finally:
            agent.close()
        assert follower.terminate() == 0 and leader.terminate() == 0
    assert not forbidden(leader.lines + follower.lines)


def quota_on_configmaps(cluster: RealCluster, name: str) -> None:
    """A ResourceQuota holding haproxy-system's ConfigMaps at their count now, its usage
    written as the resource quota controller would (it does not run here): the next
    ConfigMap created there is refused (403 Forbidden, "exceeded quota")."""
    core = client.CoreV1Api(cluster.api_client())
    count = str(len(core.list_namespaced_config_map(CONTROLPLANE_NS).items))
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": CONTROLPLANE_NS},
        "spec": {"hard": {"configmaps": count}},
    }
    core.create_namespaced_resource_quota(CONTROLPLANE_NS, quota)
    status = {"status": {"hard": {"configmaps": count}, "used": {"configmaps": count}}}
    core.patch_namespaced_resource_quota_status(name, CONTROLPLANE_NS, status)


def test_a_shard_the_server_refuses_is_said_and_freezes_no_other_tenant(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    """An operator's ResourceQuota on haproxy-system's ConfigMaps makes the server refuse
    a new Service's shard (403, exceeded quota). What the user sees: one log line, the
    leader NOT_SERVING with the reason in ListWorkloads, a Warning Event
    SlotLedgerWriteRefused on the shard's name, that Service not served (slots are never
    published unpersisted); once the quota is lifted, the next retry writes it.

    Meanwhile another namespace's Service, whose shard exists (an update, which the quota
    does not count), keeps changing: the leader published nothing at all while any
    shard was refused, so one tenant's new Service froze every other tenant's endpoint
    changes on the agents it served. Now what was persisted is published."""
    free_lease(installed)
    quota = f"rk-ledger-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(installed.api_client())
    with (
        own_namespace(installed, "rk-ledger") as ns,
        own_namespace(installed, "rk-other") as other_ns,
        ServeProcess(*serve_args(controlplane_kubeconfig, lease_s=LEASE_S)) as serve,
    ):
        backend, other = backend_name(ns, "shop"), backend_name(other_ns, "blog")
        name = shard_name(REF.name, backend)
        installed.apply(exposed_service(other_ns, "blog", ("10.0.5.1",)))
        wait_until(lambda: health(serve.address) == "SERVING", 30, message=lambda: serve.lines)
        wait_until(lambda: role_of(serve.address) == "leader", 15)
        wait_until(lambda: set(served(serve.address, other)[1].values()) == {"10.0.5.1"}, 15)
        try:
            quota_on_configmaps(installed, quota)
            installed.apply(exposed_service(ns, "shop", ("10.0.4.1", "10.0.4.2")))
            line = serve.wait_for(re.compile(r".*slot ledger write refused.*"), timeout=20)
            assert "retrying will not fix it" in line.group(0)
            assert "HTTP 403" in line.group(0) and "exceeded quota" in line.group(0)
            wait_until(lambda: health(serve.address) == "NOT_SERVING", 10)
            replica = replica_of(serve.address).replica
            assert "cannot persist the slot ledger" in replica.not_ready_reason
            assert any("exceeded quota" in p for p in replica.ledger_problems)

            def event() -> list[Any]:
                return list(
                    core.list_namespaced_event(
                        CONTROLPLANE_NS, field_selector=f"involvedObject.name={name}"
                    ).items
                )

            wait_until(lambda: bool(event()), 10)
            (refused,) = event()
            assert (refused.type, refused.reason) == ("Warning", "SlotLedgerWriteRefused")
            assert "exceeded quota" in refused.message
            assert served(serve.address, backend)[1] == {}, "published unpersisted"

            # The other tenant scales while the refusal lasts: served at once.
            installed.apply([endpoint_slice(other_ns, "blog", ("10.0.5.1", "10.0.5.2"))])
            wait_until(
                lambda: set(served(serve.address, other)[1].values()) == {"10.0.5.1", "10.0.5.2"},
                10,
                message="another tenant's change waited on the refused shard",
            )
            assert served(serve.address, backend)[1] == {}, "published unpersisted"
            blog = core.read_namespaced_config_map(shard_name(REF.name, other), CONTROLPLANE_NS)
            assert "10.0.5.2" in blog.data[SLOTS_KEY], "persisted before published"
        finally:
            with contextlib.suppress(ApiException):  # made, whatever failed after
                core.delete_namespaced_resource_quota(quota, CONTROLPLANE_NS)
        wait_until(lambda: health(serve.address) == "SERVING", 40, message=lambda: serve.lines[-5:])
        assert set(served(serve.address, backend)[1].values()) == {"10.0.4.1", "10.0.4.2"}
        serve.wait_for(re.compile(r"slot ledger persisted again"))
        refusals = [line for line in serve.lines if "slot ledger write refused" in line]
        assert len(refusals) == 1, refusals
        assert core.read_namespaced_config_map(name, CONTROLPLANE_NS).data["backend"] == backend
        assert serve.terminate() == 0
