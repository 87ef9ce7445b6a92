"""Leader election between two `controlplane serve --leader-elect` replicas on the real
`coordination.k8s.io/v1` Lease deploy/ ships (`haproxy-system/peerplane-controlplane`),
each with the control plane's own token under the shipped Role.

The leader is SIGKILLed (no release): the follower takes the Lease within the lease
duration, continues the same slots from the ledger shards (same slots, same content
hash), the agent streaming from it never loses its stream nor sees a slot move, and the
new leader's writes (a shard the former leader created) pass the Role too. A clean stop
releases the Lease. The fake-server versions: tests/kube/test_serve.py, test_leader.py
and test_replicas.py.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kubernetes import client

from controlplane.ledger.shards import shard_name
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
    lease,
    own_namespace,
    serve_args,
    served,
    settled,
)
from tests.helpers.ledger import REF
from tests.helpers.replicas import StreamAgent, replica_of, role_of, slot_history
from tests.helpers.server_process import ServeProcess
from tests.helpers.waiting import wait_until

LEASE_S = 4.0


def test_the_follower_takes_the_lease_of_a_killed_leader_and_no_slot_moves(
    installed: RealCluster, controlplane_kubeconfig: Path
) -> None:
    settled(installed)
    free_lease(installed)
    args = serve_args(controlplane_kubeconfig, lease_s=LEASE_S)
    with (
        own_namespace(installed, "rk-leader") as ns,
        ServeProcess(*args) as a,
        ServeProcess(*args) as b,
    ):
        backend = backend_name(ns, "shop")
        installed.apply(exposed_service(ns, "shop", ("10.0.2.1", "10.0.2.2")))
        leader, follower = leader_and_follower(a, b)
        first = replica_of(leader.address).replica.name
        assert lease(installed)["holderIdentity"] == first
        assert replica_of(follower.address).replica.leader == first

        # History the sorted order cannot rebuild: 10.0.2.2 keeps slot 2, 10.0.2.9 takes
        # never-used slot 3 (a freed slot comes after never-used ones).
        installed.apply([endpoint_slice(ns, "shop", ("10.0.2.2", "10.0.2.9"))])
        expected = {2: "10.0.2.2", 3: "10.0.2.9"}
        wait_until(lambda: served(leader.address, backend)[1] == expected, 15)
        wait_until(lambda: served(follower.address, backend) == served(leader.address, backend), 15)
        before = served(follower.address, backend)

        pod = installed.pods(CONTROLPLANE_NS, HAPROXY_SELECTOR)[0].metadata.name
        agent = StreamAgent(follower.address, pod=pod, backend=backend)
        try:
            wait_until(lambda: agent.last().slots == expected, 15, message=lambda: agent.ended)
            transitions = int(lease(installed).get("leaseTransitions") or 0)

            assert leader.process is not None
            os.kill(leader.process.pid, signal.SIGKILL)  # dies holding the Lease
            died = time.monotonic()
            wait_until(lambda: role_of(follower.address) == "leader", LEASE_S + 5)
            took = time.monotonic() - died
            assert took < LEASE_S + 3, took
            second = replica_of(follower.address).replica.name
            now = lease(installed)
            assert now["holderIdentity"] == second != first
            assert int(now["leaseTransitions"]) == transitions + 1
            assert served(follower.address, backend) == before  # same slots, same hash

            # The new leader writes the shard the former one created (update, Role).
            installed.apply([endpoint_slice(ns, "shop", ("10.0.2.2", "10.0.2.9", "10.0.2.5"))])

            def grown(slots: dict[int, str]) -> bool:
                return "10.0.2.5" in slots.values() and expected.items() <= slots.items()

            wait_until(lambda: grown(served(follower.address, backend)[1]), 15)
            core = client.CoreV1Api(installed.api_client())
            shard = core.read_namespaced_config_map(shard_name(REF.name, backend), CONTROLPLANE_NS)
            assert "10.0.2.5" in shard.data["slots.json"]
            wait_until(lambda: grown(agent.last().slots), 15)
            assert agent.ended is None and agent.losses == [], "the agent kept its stream"
            history = slot_history([agent])
            assert history == {a: {s} for s, a in agent.last().slots.items()}, "no slot moved"
        finally:
            agent.close()
        assert follower.terminate() == 0
        assert not lease(installed).get("holderIdentity"), "released on a clean stop"
    assert not forbidden(leader.lines + follower.lines)
