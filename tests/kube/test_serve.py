"""Two `controlplane serve --source kubernetes --leader-elect` processes on one Lease.

The fake API server stands in for the cluster; each control plane talks to it with the
real client through a kubeconfig. Both serve; only the Lease holder assigns slots. When
the leader is killed the other takes the Lease within the lease duration and continues
the same slots (read back from the slot ConfigMap), so the content hash does not change.
More replicas and failover under scale events: test_replicas.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

from tests.helpers.replicas import health
from tests.helpers.server_process import ServeProcess, grpcurl
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import endpoint_slice, service

LEASE_S = 2.0
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
NS = "haproxy-system"


def role(address: str) -> str:
    """single, leader or follower, from ListWorkloads.replica."""
    reply = json.loads(grpcurl(address, "peerplane.v1.PeerPlane/ListWorkloads", data="{}"))
    return str(reply.get("replica", {}).get("role", ""))


def get_snapshot(address: str) -> dict[str, Any]:
    data = json.dumps({"workload": WORKLOAD})
    snapshot: dict[str, Any] = json.loads(
        grpcurl(address, "peerplane.v1.PeerPlane/GetSnapshot", data=data)
    )
    return snapshot


def shop_slots(address: str) -> tuple[str, dict[int, str]]:
    """The content hash and slot -> address of the shop backend, from GetSnapshot."""
    snapshot = get_snapshot(address)
    (shop,) = [b for b in snapshot["backends"] if b["name"] == "default_shop_http"]
    slots = {int(s["index"]): s["address"] for s in shop["slots"] if s.get("enabled")}
    return str(snapshot["content_hash"]), slots


def serve_args(kubeconfig: Path) -> tuple[str, ...]:
    return (
        "--source=kubernetes",
        f"--kubeconfig={kubeconfig}",
        "--leader-elect",
        f"--lease-duration={LEASE_S}",
        f"--lease-namespace={NS}",
        f"--configmap={NS}/haproxy-settings",
    )


def test_one_serves_the_other_takes_over_with_the_same_slots(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    with ServeProcess(*serve_args(kubeconfig)) as a, ServeProcess(*serve_args(kubeconfig)) as b:
        wait_until(lambda: health(a.address) == health(b.address) == "SERVING", 10)
        wait_until(lambda: "leader" in (role(a.address), role(b.address)), 10)
        leader, follower = (a, b) if role(a.address) == "leader" else (b, a)
        assert role(follower.address) == "follower"

        # History the sorted order cannot rebuild: 10.0.2.2 keeps slot 2 and 10.0.2.9
        # takes never-used slot 3 (a freed slot comes after never-used ones).
        api.apply(endpoint_slice("shop", {"10.0.2.2": True, "10.0.2.9": True}))
        wait_until(lambda: shop_slots(leader.address)[1] == {2: "10.0.2.2", 3: "10.0.2.9"})
        saved = api.get("ConfigMap", NS, "peerplane-slots.default.shop.http")  # its shard
        assert saved is not None and "10.0.2.9" in saved["data"]["slots.json"]
        before = shop_slots(leader.address)

        assert leader.process is not None
        os.kill(leader.process.pid, signal.SIGKILL)  # dies without releasing the Lease
        died = time.monotonic()
        wait_until(lambda: role(follower.address) == "leader", LEASE_S + 4)
        assert time.monotonic() - died < LEASE_S + 3
        assert shop_slots(follower.address) == before  # same slots, same content hash
        lease = api.get("Lease", NS, "peerplane-controlplane") or {}
        assert lease["spec"]["leaseTransitions"] >= 1

        # A leader that finds the Lease taken stops serving at once and exits.
        lease["spec"]["holderIdentity"] = "someone-else"
        api.apply(lease)
        assert follower.process is not None
        assert follower.process.wait(timeout=LEASE_S + 5) == 1
        follower.wait_for(re.compile("lost the lease: stopping at once"))


def test_rejected_annotation_becomes_an_event(api: FakeKubeAPI, kubeconfig: Path) -> None:
    api.apply(service("shop", load_balance="bogus"))
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 10)
        wait_until(lambda: len(api.list("Event")) == 1, 5)
        (event,) = api.list("Event")
        assert event["reason"] == "InvalidAnnotation"
        assert event["involvedObject"]["name"] == "shop"
        assert "load-balance" in event["message"]
        assert serve.terminate() == 0
        lease = api.get("Lease", NS, "peerplane-controlplane") or {}
        assert not lease["spec"].get("holderIdentity")  # released on a clean stop


def test_a_burst_of_endpoint_changes_gives_a_handful_of_versions(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    args = [a for a in serve_args(kubeconfig) if a != "--leader-elect"]
    with ServeProcess(*args) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 10)
        started = time.monotonic()
        for i in range(1000):
            api.apply(endpoint_slice("shop", {"10.0.2.1": True, f"10.0.3.{i % 250}": True}))
        assert time.monotonic() - started < 10
        # 10.0.2.1 never moves; where the last newcomer lands depends on how many
        # computations the burst was debounced into (each frees one slot).
        final = {"10.0.2.1", "10.0.3.249"}

        def settled() -> bool:
            slots = shop_slots(serve.address)[1]
            return set(slots.values()) == final and slots.get(1) == "10.0.2.1"

        wait_until(settled, 10)
        assert 2 <= int(get_snapshot(serve.address)["version"]) <= 15  # debounced, not 1,000


def test_a_ledger_write_the_api_refuses_is_said_once_and_makes_the_leader_not_ready(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """Past ~1,650 Services the API refused the single-object ledger (422): the leader
    logged a traceback every second, stayed Ready, and the fleet froze on its last
    version without a word where operators look. Now: one log line per cause, a
    Warning Event on the shard, the metric, ListWorkloads.replica, NOT_SERVING; and back
    to SERVING with the new version once the API takes the write."""
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 15)
        wait_until(lambda: role(serve.address) == "leader", 10)
        shard = "peerplane-slots.default.shop.http"
        wait_until(lambda: api.get("ConfigMap", NS, shard) is not None, 10)
        api.fail_next("ConfigMap", 422, count=1000, match="configmaps", method="PUT")
        writes = shard_writes(api, shard)
        api.apply(endpoint_slice("shop", {"10.0.2.2": True, "10.0.2.9": True}))
        serve.wait_for(re.compile(r"slot ledger write refused \(retrying will not fix it\).*422"))
        wait_until(lambda: health(serve.address) == "NOT_SERVING", 10)
        reply = json.loads(
            grpcurl(serve.address, "peerplane.v1.PeerPlane/ListWorkloads", data="{}")
        )
        assert any("422" in p for p in reply["replica"].get("ledger_problems", [])), reply
        assert "cannot persist the slot ledger" in reply["replica"]["not_ready_reason"]
        wait_until(
            lambda: any(e.get("reason") == "SlotLedgerWriteRefused" for e in api.list("Event")),
            10,
        )
        assert "10.0.2.9" not in shop_slots(serve.address)[1].values(), "published unpersisted"
        # The write and its retries after 1 s and 2 s more are refused; once it is taken
        # again, every line up to "persisted again" is read: one line for the one cause.
        wait_until(lambda: shard_writes(api, shard) >= writes + 3, 15, "two refused retries")

        api.clear_faults()
        wait_until(lambda: health(serve.address) == "SERVING", 40)
        assert "10.0.2.9" in shop_slots(serve.address)[1].values()
        serve.wait_for(re.compile(r"slot ledger persisted again"))
        refused = [line for line in serve.lines if "slot ledger write refused" in line]
        assert len(refused) == 1, refused
        assert not any("Traceback" in line for line in serve.lines)


def test_a_restarted_leader_serves_its_shard_not_a_stale_copy_under_another_name(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """A backup of a shard restored under another name with the ledger label was read as
    the backend's shard when it came last: a restarted replica continued stale slots and
    moved clients. Now the copy is ignored, listed in ledger_problems and an Event."""
    args = [a for a in serve_args(kubeconfig) if a != "--leader-elect"]
    shard = "peerplane-slots.default.shop.http"
    with ServeProcess(*args) as first:
        wait_until(lambda: health(first.address) == "SERVING", 10)
        wait_until(lambda: api.get("ConfigMap", NS, shard) is not None, 10)
        stale = api.get("ConfigMap", NS, shard)
        assert stale is not None
        api.apply(endpoint_slice("shop", {"10.0.2.2": True, "10.0.2.9": True}))
        wait_until(lambda: shop_slots(first.address)[1] == {2: "10.0.2.2", 3: "10.0.2.9"})
        api.apply(endpoint_slice("shop", {"10.0.2.2": True, "10.0.2.9": True, "10.0.2.7": True}))
        # Built from the stale copy instead, 10.0.2.7 would take never-used slot 3.
        current = {1: "10.0.2.7", 2: "10.0.2.2", 3: "10.0.2.9"}
        wait_until(lambda: shop_slots(first.address)[1] == current)
        copy = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"{shard}.bak",
                "namespace": NS,
                "labels": stale["metadata"]["labels"],
            },
            "data": stale["data"],
        }
        api.apply(copy)
        assert first.terminate() == 0
    with ServeProcess(*args) as second:
        wait_until(lambda: health(second.address) == "SERVING", 10)
        assert shop_slots(second.address)[1] == current
        reply = json.loads(
            grpcurl(second.address, "peerplane.v1.PeerPlane/ListWorkloads", data="{}")
        )
        (problem,) = reply["replica"]["ledger_problems"]
        assert f"{shard}.bak" in problem and "not read" in problem
        wait_until(
            lambda: any(
                e["reason"] == "SlotLedgerObjectIgnored"
                and e["involvedObject"]["name"] == f"{shard}.bak"
                for e in api.list("Event")
            ),
            5,
        )


def shard_writes(api: FakeKubeAPI, shard: str) -> int:
    """PUTs of one ledger shard the fake API server received (taken or refused)."""
    return sum(1 for m, p in api.requests if m == "PUT" and p.endswith(f"/configmaps/{shard}"))


def test_the_first_leader_publishes_its_first_snapshot_with_every_endpoint_in_a_slot(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """A first start (no ledger yet): the replica takes the Lease before its first
    computation, so v1 already has the slots. Before, it computed first as a follower
    with the empty ledger and published v1 with every backend slotless, the slots
    following in v2: at 8,000 Services the agents applied 160,000 slot changes through
    the runtime API after their first start (docs/findings.md, 2026-12-05)."""
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 10)
        wait_until(lambda: len(shop_slots(serve.address)[1]) == 2, 10)
        assert int(get_snapshot(serve.address)["version"]) == 1


def test_a_first_start_of_300_services_publishes_from_bulk_objects_then_writes_the_shards(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """300 new backends (past `shards.BULK_MIN`): v1, with every endpoint in a slot, is
    published after a few bulk writes, not 300 creates; the loop then makes them shards
    by itself (no change needed) and deletes the bulk objects; v1 stays the version."""
    for i in range(299):
        api.apply(service(f"svc{i}"))
        api.apply(endpoint_slice(f"svc{i}", {f"10.1.{i // 200}.{i % 200 + 1}": True}))
    with ServeProcess(*serve_args(kubeconfig)) as serve:
        wait_until(lambda: health(serve.address) == "SERVING", 30)
        snapshot = get_snapshot(serve.address)
        enabled = sum(1 for b in snapshot["backends"] for s in b["slots"] if s.get("enabled"))
        assert enabled == 301 and int(snapshot["version"]) == 1
        # in this order: the bulk write, the first publication, the shards done
        serve.wait_for(re.compile(r"300 new backends written in 1 bulk objects"))
        serve.wait_for(re.compile(r"published \S+ v1 "))
        serve.wait_for(re.compile(r"every backend of 1 bulk objects is a shard"), 60)
        order = [
            i
            for pattern in ("bulk objects; making", "published", "is a shard; deleted")
            for i, line in enumerate(serve.lines)
            if pattern in line
        ]
        assert order == sorted(order) and len(order) == 3, serve.lines

        def ledger_objects() -> tuple[int, int]:
            names = [o["metadata"]["name"] for o in api.list("ConfigMap")]
            bulk = sum(1 for n in names if n.startswith("peerplane-slots.bulk-"))
            shards = sum(1 for n in names if n.startswith("peerplane-slots.") and "bulk-" not in n)
            return shards, bulk

        wait_until(lambda: ledger_objects() == (300, 0), 60, lambda: f"{ledger_objects()}")
        assert int(get_snapshot(serve.address)["version"]) == 1
