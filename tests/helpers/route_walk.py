"""A random walk of route changes through the incremental `Computer` and `Encoder`, each
step checked against a fresh `compute` and `encode`: the route-table update tests' common
check, with and without address-pool lanes."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from controlplane.compute import Computer, compute
from controlplane.model import ClusterState
from controlplane.publish import Encoder, encode


def walk_against_fresh(
    rng: random.Random,
    new_route: Callable[[str], Any],
    cluster_of: Callable[[dict[str, Any]], ClusterState],
    *,
    now: float = 0.0,
    steps: int = 25,
) -> tuple[Computer, Any]:
    """`steps` changes of routes r0..r7 (four at first; a change replaces one with
    `new_route(name)` or, 30% of the time, deletes one): the snapshots, their bytes and
    the rejections equal a fresh computation at every step. The computer and its last
    result, for the caller's checks of how it got there."""
    names = [f"r{i}" for i in range(8)]
    routes = {name: new_route(name) for name in names[:4]}
    computer, encoder = Computer(), Encoder()
    previous: dict[str, Any] = {}
    incremental = None
    for _ in range(steps):
        cluster_state = cluster_of(routes)
        incremental = computer.compute(cluster_state, previous, now=now)
        fresh = compute(cluster_state, previous, now=now)
        assert incremental.workloads == fresh.workloads
        assert encoder.encode(incremental.workloads) == encode(fresh.workloads)
        assert incremental.rejections == fresh.rejections
        previous = dict(incremental.assignment)
        name = rng.choice(names)
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            routes[name] = new_route(name)
    return computer, incremental
