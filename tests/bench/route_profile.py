"""The profile of one route change at N HTTPRoutes, stage by stage, in process: what
`serve`'s compute and encode and an agent's apply spend on one new HTTPRoute (issue 33's
closing note: where the time goes; docs/findings.md, "One route change at 10,000 routes:
the profile, and the group digests spliced").

The route propagation benchmark's shape: N one-rule HTTPRoutes, each its own host under
the Gateway's wildcard listener (`*.example.com`), then one new HTTPRoute of its own host
per trial, each state stamped with its changed key (`changes.ChangeLog`, as the informers'
states are). Each trial is computed (`Computer`), encoded (`Encoder`), published
(`SnapshotStore`, the delta message built), then applied as an agent does without HAProxy
(`Held.apply` with its content-hash check, `render_held` from the last render,
`classify`); the heap is frozen after the setup, as the loop and the agent freeze theirs.
Each stage's figure is this thread's CPU time (`time.thread_time`: a wait for a core on a
loaded machine is not in it), the sub-stages timed by wrapping the functions named.
Not a registered benchmark (no target): `python -m tests.bench.route_profile [N [TRIALS]]
[--repoint]` prints the medians (default 10,000 routes, 30 trials; `--repoint`: each trial
re-points an existing HTTPRoute to the other Service instead of adding one).
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from controlplane.changes import ChangeLog
from controlplane.compute import Computer
from controlplane.compute.computer import Computer as ComputerClass
from controlplane.loop.heap import Heap
from controlplane.model import HTTPRoute
from controlplane.publish import Encoder
from controlplane.publish.store import SnapshotStore
from controlplane.routes import route_computer, table_update
from controlplane.source.convert_routes import http_route_from
from nodeagent.config.changes import classify
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.held import Held
from peerplane import parts
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import median
from tests.bench.route_table import routed_cluster
from tests.helpers.builders import WORKLOAD

# (owner, attribute, label): the functions timed inside the stages
TIMED: tuple[tuple[Any, str, str], ...] = (
    (parts.ContentParts, "content_hash", "content hash"),
    (importlib.import_module("controlplane.publish.encode"), "regroup", "route groups"),
    (table_update, "changed_routes", "which routes changed"),
    (table_update, "route_outcome", "the route's outcome"),
    (table_update.TableIndex, "_apply", "its host decided, the listener's rules"),
    (table_update.TableIndex, "update", "the table's update"),
    (route_computer, "place_routes", "placement"),
    (route_computer.RouteComputer, "compute", "the route table"),
    (ComputerClass, "_assemble", "assembly"),
)


def _timed(spent: dict[str, float], owner: Any, name: str, label: str) -> Callable[..., Any]:
    """Wrap `owner.name` so each call adds its thread CPU time to `spent[label]`; the
    original, to put back."""
    original: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - start

    setattr(owner, name, wrapper)
    return original


def http_route(index: int, service: int | None = None) -> HTTPRoute:
    """A one-rule HTTPRoute of its own host, to one of two Services (`service`: which;
    else by its index)."""
    return http_route_from(
        {
            "metadata": {"name": f"bulk-{index}", "namespace": "default"},
            "spec": {
                "parentRefs": [{"name": "web"}],
                "hostnames": [f"b{index}.example.com"],
                "rules": [
                    {
                        "matches": [{"path": {"type": "PathPrefix", "value": f"/p{index}"}}],
                        "backendRefs": [
                            {"name": f"svc-{index % 2 if service is None else service}", "port": 80}
                        ],
                    }
                ],
            },
        }
    )


def profile(routes: int, trials: int, repoint: bool = False) -> dict[str, list[float]]:
    """Each stage's thread CPU seconds per trial, in the order measured; `repoint`: each
    trial re-points an existing HTTPRoute to the other Service (its group changed, no
    group added) instead of adding one."""
    spent: dict[str, float] = defaultdict(float)
    originals = [
        (owner, name, _timed(spent, owner, name, label))
        for owner, name, label in TIMED
        if hasattr(owner, name)  # (an older checkout, measured beside: what it has)
    ]
    try:
        return _profile(routes, trials, spent, repoint)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
        gc.unfreeze()


def _profile(
    routes: int, trials: int, spent: dict[str, float], repoint: bool
) -> dict[str, list[float]]:
    state = routed_cluster(4, "*.example.com")
    log = ChangeLog()
    bulk = tuple(map(http_route, range(routes)))
    stamped = log.stamp({("HTTPRoute", r.namespace, r.name): r for r in bulk})
    state = dataclasses.replace(state, http_routes=bulk, changes=stamped)
    computer, encoder, store, heap = Computer(), Encoder(), SnapshotStore(), Heap()
    result = computer.compute(state, {})
    store.publish(encoder.encode(result.workloads))
    heap.settle(encoder.encoded)
    first = store.get(WORKLOAD)
    assert first is not None
    held = Held.from_snapshot(pb.ServerMessage.FromString(first.message_bytes).snapshot)
    options = RenderOptions("haproxy-a")
    rendered = render_held(held, options)
    held.computed_hash()
    gc.collect()
    gc.freeze()
    rows: dict[str, list[float]] = defaultdict(list)
    warm = 3  # the first changes after a start differ (indexes made, caches filled)
    for trial in range(trials + warm):
        if repoint:  # the route at `at`, to the other Service than it had
            at = (trial * 7919) % routes
            added = http_route(at, (at + 1 + (trial // routes)) % 2)
            changed = (*state.http_routes[:at], added, *state.http_routes[at + 1 :])
        else:
            added = http_route(routes + trial)
            changed = (*state.http_routes, added)
        stamped = log.stamp({("HTTPRoute", added.namespace, added.name): added})
        state = dataclasses.replace(state, http_routes=changed, changes=stamped)
        before = store.get(WORKLOAD)
        assert before is not None
        spent.clear()
        start = time.thread_time()
        result = computer.compute(state, result.assignment)
        computed = time.thread_time()
        compute_spent = dict(spent)
        spent.clear()
        content = encoder.encode(result.workloads)
        encoded = time.thread_time()
        encode_spent = dict(spent)
        store.publish(content)
        after = store.get(WORKLOAD)
        assert after is not None
        message = store.delta_message(WORKLOAD, after.content_hash, before.content_hash)
        assert message is not None
        published = time.thread_time()
        heap.settle(encoder.encoded)
        spent.clear()
        received = time.thread_time()
        delta = pb.ServerMessage.FromString(message).delta
        parsed = time.thread_time()
        held_next, change = held.apply(delta)
        applied = time.thread_time()
        verify = spent["content hash"]
        rendered_next = render_held(held_next, options, rendered, change)
        done = time.thread_time()
        classify(held, rendered, held_next, rendered_next, change)
        decided = time.thread_time()
        held, rendered = held_next, rendered_next
        if trial < warm:
            continue
        rows["compute"].append(computed - start)
        for label in (
            "the route table",
            "the table's update",
            "which routes changed",
            "the route's outcome",
            "its host decided, the listener's rules",
            "placement",
            "assembly",
        ):
            rows[f"  {label}"].append(compute_spent.get(label, 0.0))
        rows["encode"].append(encoded - computed)
        rows["  route groups"].append(encode_spent.get("route groups", 0.0))
        rows["  content hash"].append(encode_spent.get("content hash", 0.0))
        rows["publish, the delta message"].append(published - encoded)
        rows["agent: the delta parsed"].append(parsed - received)
        rows["agent: applied and verified"].append(applied - parsed)
        rows["  the content hash verified"].append(verify)
        rows["agent: render"].append(done - applied)
        rows["agent: classify"].append(decided - done)
    return rows


def main(argv: list[str]) -> None:
    repoint = "--repoint" in argv
    argv = [a for a in argv if a != "--repoint"]
    routes = int(argv[0]) if argv else 10000
    trials = int(argv[1]) if len(argv) > 1 else 30
    rows = profile(routes, trials, repoint)
    load = os.getloadavg()[0]
    what = "one HTTPRoute re-pointed" if repoint else "one new HTTPRoute"
    print(f"{what} at {routes} routes, {trials} trials, load {load:.2f}")
    print("stage: thread CPU ms, median")
    for label, values in rows.items():
        print(f"{label:45s} {median(values) * 1000:7.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
