"""Several `controlplane serve --leader-elect` replicas on one Lease: every replica serves.

Real processes, real gRPC, the fake API server. Every replica becomes Ready and serves the
same content hash; the leader assigns slots, the followers compute with its ledger. When
the leader is SIGKILLed during scale events, agents on followers keep their streams,
get removals at once and additions once the new leader writes the ledger, and no slot
ever moves. A follower that cannot read the ledger stays NotReady and says why.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from controlplane.ledger.shards import shard_from
from tests.helpers.replicas import (
    NS,
    hashes,
    health,
    replica_of,
    replicas,
    role_of,
    slot_history,
)
from tests.helpers.replicas import StreamAgent as Agent
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import endpoint_slice


@pytest.mark.parametrize("count", [2, 3])
def test_every_replica_is_ready_and_serves_the_same_content(
    api: FakeKubeAPI, kubeconfig: Path, count: int
) -> None:
    with replicas(kubeconfig, count, 2.0) as processes:
        addresses = [p.address for p in processes]
        wait_until(lambda: all(health(a) == "SERVING" for a in addresses), 20)
        wait_until(lambda: any(replica_of(a).replica.role == "leader" for a in addresses), 10)
        statuses = [replica_of(a).replica for a in addresses]
        assert sorted(s.role for s in statuses) == ["follower"] * (count - 1) + ["leader"]
        (leader,) = [s for s in statuses if s.role == "leader"]
        assert all(s.ready and not s.not_ready_reason for s in statuses)
        assert all(s.leader == leader.name for s in statuses if s.role == "follower")
        wait_until(lambda: len({frozenset(hashes(a)) for a in addresses}) == 1, 10)
        agents = [Agent(a) for a in addresses]
        try:
            wait_until(lambda: all(agent.snapshots for agent in agents), 10)
            assert len({agent.last()[1] for agent in agents}) == 1
            assert hashes(addresses[0]) == {agents[0].last()[1]}
            assert all(agent.ended is None for agent in agents)
        finally:
            for agent in agents:
                agent.close()


def test_leader_sigkill_during_scale_events_is_invisible_to_agents_on_followers(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    lease_s = 3.0
    with replicas(kubeconfig, 3, lease_s) as processes:
        addresses = [p.address for p in processes]
        wait_until(lambda: all(health(a) == "SERVING" for a in addresses), 20)
        wait_until(lambda: any(replica_of(a).replica.role == "leader" for a in addresses), 10)
        (leader,) = [p for p in processes if replica_of(p.address).replica.role == "leader"]
        followers = [p for p in processes if p is not leader]
        agents = [Agent(p.address) for p in followers]
        try:
            # Scale up through the leader's ledger; followers serve what it assigned.
            current = {"10.0.2.1": True, "10.0.2.2": True}
            for address in ("10.0.2.3", "10.0.2.4", "10.0.2.5"):
                current[address] = True
                api.apply(endpoint_slice("shop", current))
                time.sleep(0.2)
            wait_until(
                lambda: all(len(agent.last()[2]) == 5 for agent in agents),
                10,
                message=lambda: [a.last() for a in agents],
            )

            assert leader.process is not None
            os.kill(leader.process.pid, signal.SIGKILL)  # dies holding the Lease
            holder = (api.get("Lease", NS, "peerplane-controlplane") or {})["spec"]
            # While nobody leads: a removal and an addition.
            del current["10.0.2.1"]
            current["10.0.2.6"] = True
            api.apply(endpoint_slice("shop", current))

            def removed(slots: dict[int, str]) -> bool:
                return "10.0.2.1" not in slots.values()

            wait_until(lambda: all(agent.first_with(removed) for agent in agents), 10)
            lease_now = (api.get("Lease", NS, "peerplane-controlplane") or {})["spec"]
            # The removal came before anyone took the Lease over; the addition waits.
            assert lease_now["holderIdentity"] == holder["holderIdentity"]
            assert all("10.0.2.6" not in agent.last()[2].values() for agent in agents)
            waiting = [replica_of(p.address) for p in followers]
            assert [w.replica.endpoints_waiting for w in waiting] == [1, 1]
            assert all(w.workloads[0].endpoints_waiting == 1 for w in waiting)

            def added(slots: dict[int, str]) -> bool:
                return "10.0.2.6" in slots.values()

            wait_until(lambda: all(agent.first_with(added) for agent in agents), lease_s + 10)
            lease_after = (api.get("Lease", NS, "peerplane-controlplane") or {})["spec"]
            assert lease_after["holderIdentity"] != holder["holderIdentity"]
            assert lease_after["leaseTransitions"] >= 1

            # More scale events under the new leader.
            del current["10.0.2.2"]
            current["10.0.2.7"] = True
            api.apply(endpoint_slice("shop", current))
            wait_until(
                lambda: all(set(agent.last()[2].values()) == set(current) for agent in agents), 10
            )
            wait_until(lambda: len({agent.last()[1] for agent in agents}) == 1, 10)
            wait_until(lambda: len({frozenset(hashes(p.address)) for p in followers}) == 1, 10)
            assert hashes(followers[0].address) == {agents[0].last()[1]}
            assert all(agent.ended is None for agent in agents), [a.ended for a in agents]
            moved = {a: s for a, s in slot_history(agents).items() if len(s) > 1}
            assert moved == {}
            statuses = [replica_of(p.address).replica for p in followers]
            assert sorted(s.role for s in statuses) == ["follower", "leader"]
            assert all(s.endpoints_waiting == 0 and s.ready for s in statuses)
        finally:
            for agent in agents:
                agent.close()


def test_a_follower_that_cannot_read_the_ledger_stays_not_ready_and_says_why(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    with replicas(kubeconfig, 1, 2.0) as (leader,):
        wait_until(lambda: health(leader.address) == "SERVING", 20)
        wait_until(lambda: replica_of(leader.address).replica.role == "leader", 10)
        api.fail_next("ConfigMap", 403, count=100_000, match="peerplane-slots")
        with replicas(kubeconfig, 1, 2.0) as (follower,):
            found = follower.wait_for(re.compile(r"not ready \(follower\): slot ledger not read"))
            assert "403" in follower.wait_for(re.compile(r"not ready.*403.*")).group(0), found
            status = replica_of(follower.address).replica
            assert (status.role, status.ready) == ("follower", False)
            assert "slot ledger not read" in status.not_ready_reason
            assert "403" in status.not_ready_reason
            assert health(follower.address) == "NOT_SERVING"
            assert replica_of(follower.address).workloads == []


@pytest.mark.parametrize("damage", ["delete", "swap-two-slots"])
def test_a_damaged_ledger_never_moves_a_follower_and_the_leader_rewrites_it(
    api: FakeKubeAPI, kubeconfig: Path, damage: str
) -> None:
    """Deleting the ledger ConfigMap made a follower publish the backend with 0 of 4
    slots enabled (HTTP 503 through every HAProxy it served, Ready all along, nothing
    logged), and the leader did not write it again until its next slot change; editing
    two slots by hand made leader and follower disagree on what SRV_1 means for 20 s and
    more. Now the follower keeps its last good copy and says so, the leader writes its
    own again at once, and the two never disagree."""
    with replicas(kubeconfig, 2, 3.0) as processes:
        addresses = [p.address for p in processes]
        wait_until(lambda: all(health(a) == "SERVING" for a in addresses), 20)
        wait_until(lambda: {role_of(a) for a in addresses} == {"leader", "follower"}, 10)
        (follower,) = [p for p in processes if role_of(p.address) == "follower"]
        agent = Agent(follower.address)
        try:
            wait_until(lambda: len(agent.last()[2]) == 2, 10)
            served = agent.last()
            name = "peerplane-slots.default.shop.http"
            shard = api.get("ConfigMap", NS, name)
            assert shard is not None
            if damage == "delete":
                api.delete("ConfigMap", NS, name)
            else:
                text = shard["data"]["slots.json"]
                swapped = text.replace("10.0.2.1", "X").replace("10.0.2.2", "10.0.2.1")
                shard["data"]["slots.json"] = swapped.replace("X", "10.0.2.2")
                api.apply(shard)
            # The leader writes its own copy again (signed: its hash matches).
            wait_until(
                lambda: (
                    (api.get("ConfigMap", NS, name) or {}).get("data", {}).get("slots.json")
                    == shard["data"]["slots.json"]
                ),
                10,
            )
            (leader,) = [p for p in processes if p is not follower]
            what = "deleted" if damage == "delete" else "edited"
            leader.wait_for(re.compile(rf"slot ledger shard for default_shop_http {what}"))
            if damage != "delete":  # a deletion repaired within the debounce goes unsaid
                follower.wait_for(re.compile(r"slot ledger: shard " + re.escape(name)))
            wait_until(lambda: replica_of(follower.address).replica.ledger_problems == [], 10)
            assert agent.last()[2] == served[2], "the follower's slots never changed"
            assert slot_history([agent]) == {a: {s} for s, a in served[2].items()}
            assert all(health(a) == "SERVING" for a in addresses)
        finally:
            agent.close()


SHARD = "peerplane-slots.default.shop.http"


def shard_history(api: FakeKubeAPI) -> list[dict[tuple[str, int], int]]:
    """Every version the shop shard had, in order: endpoint -> slot."""
    out = []
    for version in api.versions("ConfigMap", NS, SHARD):
        shard = shard_from(version, time.time())
        assert shard.slots is not None, shard.problem
        out.append(dict(shard.slots.slots))
    return out


def test_a_paused_leader_that_wakes_after_its_lease_moved_changes_no_slot(
    api: FakeKubeAPI, kubeconfig: Path
) -> None:
    """Two replicas that both believe they lead for a moment: the leader is SIGSTOPped
    until its Lease expires and the other takes it and assigns new endpoints; SIGCONT
    wakes it with a stale assignment and buffered watch events, before its elector has
    read the Lease. It must not write the ledger (its `is_leader` lapses with its renew
    deadline) and no endpoint's slot moves in the ledger nor on any agent. The Lease is
    read slowly (1 s) meanwhile, so that the woken elector learns late, as over a slow
    API server: before the fix, the woken replica rewrote the ledger with its own stale
    assignment in that second."""
    lease_s = 3.0
    with replicas(kubeconfig, 2, lease_s) as processes:
        addresses = [p.address for p in processes]
        wait_until(lambda: all(health(a) == "SERVING" for a in addresses), 20)
        wait_until(lambda: {role_of(a) for a in addresses} == {"leader", "follower"}, 10)
        (old,) = [p for p in processes if role_of(p.address) == "leader"]
        (new,) = [p for p in processes if p is not old]
        agents = [Agent(old.address), Agent(new.address, pod="haproxy-b")]
        try:
            wait_until(lambda: all(len(a.last().slots) == 2 for a in agents), 10)
            assert old.process is not None
            os.kill(old.process.pid, signal.SIGSTOP)
            try:
                wait_until(lambda: role_of(new.address) == "leader", lease_s + 6)
                # One at a time: the new leader gives 10.0.2.9 slot 3, then 10.0.2.8
                # slot 4; the paused one would see both at once and give them in order.
                current = {"10.0.2.1": True, "10.0.2.2": True, "10.0.2.9": True}
                api.apply(endpoint_slice("shop", current))
                wait_until(lambda: "10.0.2.9" in agents[1].last().slots.values(), 10)
                current["10.0.2.8"] = True
                api.apply(endpoint_slice("shop", current))
                wait_until(lambda: "10.0.2.8" in agents[1].last().slots.values(), 10)
                api.slow("Lease", 1.0, method="GET")
            finally:
                os.kill(old.process.pid, signal.SIGCONT)
            # It finds the Lease taken: stops serving at once and exits (its pod restarts).
            assert old.process.wait(timeout=10) == 1
            old.wait_for(re.compile("lost the lease: stopping at once"))
            api.clear_faults()
            wait_until(lambda: set(agents[1].last().slots.values()) == set(current), 10)
            # The woken replica has exited: once its agent's stream has ended (what it
            # sent was read) and the API server answered every request (what it wrote is
            # kept), nothing of it can arrive any more.
            wait_until(
                lambda: agents[0].ended is not None and api.in_flight() == 0,
                5,
                "the woken replica's last writes and messages",
            )
            history = shard_history(api)
            moved = {
                endpoint: {slots[endpoint] for slots in history if endpoint in slots}
                for slots in history
                for endpoint in slots
            }
            assert {e: s for e, s in moved.items() if len(s) > 1} == {}, history
            assert {e: s for e, s in slot_history(agents).items() if len(s) > 1} == {}
            assert set(agents[0].last().slots.values()) <= set(current)
        finally:
            for agent in agents:
                agent.close()
