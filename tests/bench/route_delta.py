"""One route change with many HTTPRoutes: the bytes it costs on the wire and the agent's
apply (docs/design.md, "Route rendering and runtime updates": how a route change travels).

The route table benchmark's cluster (`tests.bench.route_table`: two rules per HTTPRoute,
each route its own host, two routes per Service), computed and encoded by the control
plane, published in a `SnapshotStore`; then one HTTPRoute's PathPrefix changes (a map
rule: the agent's runtime path), five times. Figures: the `ServerMessage(delta=...)` the
store sends for it against the full snapshot, and the agent's pure part of applying it
(`Held.apply` with its content-hash check, `render_held` from the previous rendering with
the change set, `changes.classify`), without HAProxy. The setup's objects are frozen out
of the garbage collector (`gc.freeze`) before the changes, so a collection of the control
plane's heap (which an agent's process does not hold) is charged to no step. Uses only
APIs that predate route groups, so the same file measures the code before them (run it
from a worktree of that commit). Quick: 3,000 routes; full: 3,000 and 10,000.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time

from controlplane.compute import Computer
from controlplane.publish import Encoder
from controlplane.publish.store import SnapshotStore
from nodeagent.config.changes import classify
from nodeagent.config.render import RenderOptions, render_held
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.bench.common import Result, log, median
from tests.bench.route_table import http_route, routed_cluster
from tests.helpers.builders import WORKLOAD

TARGETS = {"route_change_delta_bytes_10000": "< 8 KiB"}
CHANGES = 5


def _one(routes: int) -> list[Result]:
    state = routed_cluster(routes)
    computer, encoder, store = Computer(), Encoder(), SnapshotStore()
    result = computer.compute(state, {})
    store.publish(encoder.encode(result.workloads))
    first = store.get(WORKLOAD)
    assert first is not None
    held = Held.from_snapshot(pb.ServerMessage.FromString(first.message_bytes).snapshot)
    opts = RenderOptions("haproxy-a")
    rendered = render_held(held, opts)
    # The setup's objects (the control plane's state, which an agent's process does not
    # hold) leave the collector's generations: a full collection of them is not charged
    # to whichever step it happens in.
    gc.collect()
    gc.freeze()
    sizes, snapshot_sizes, control, encodes, applies, renders, decides = [], [], [], [], [], [], []
    decision = ""
    for step in range(1, CHANGES + 1):
        before = store.get(WORKLOAD)
        assert before is not None
        changed = list(state.http_routes)
        changed[7] = http_route(7, step)
        state = dataclasses.replace(state, http_routes=tuple(changed))
        start = time.perf_counter()
        result = computer.compute(state, result.assignment)
        computed = time.perf_counter()
        store.publish(encoder.encode(result.workloads))
        encodes.append(time.perf_counter() - computed)
        after = store.get(WORKLOAD)
        assert after is not None
        message = store.delta_message(WORKLOAD, after.content_hash, before.content_hash)
        control.append(time.perf_counter() - start)
        assert message is not None
        sizes.append(len(message))
        snapshot_sizes.append(len(after.message_bytes))
        delta = pb.ServerMessage.FromString(message).delta
        start = time.perf_counter()
        held_next, change = held.apply(delta)
        applied = time.perf_counter()
        rendered_next = render_held(held_next, opts, rendered, change)
        done = time.perf_counter()
        outcome = classify(held, rendered, held_next, rendered_next, change)
        decided = time.perf_counter()
        applies.append(applied - start)
        renders.append(done - applied)
        decides.append(decided - done)
        decision = f"{outcome.kind.value}: {outcome.reason}"
        held, rendered = held_next, rendered_next
    gc.unfreeze()
    rules = sum(1 for _ in _rules(held))
    total = [a + r + d for a, r, d in zip(applies, renders, decides, strict=True)]
    log(
        f"route change at {routes} HTTPRoutes ({rules} rules): delta {median(sizes):,.0f} B"
        f" (snapshot {median(snapshot_sizes):,.0f} B); control plane compute+encode+delta"
        f" {median(control) * 1000:.1f} ms (encode+publish {median(encodes) * 1000:.1f} ms);"
        f" agent apply+verify {median(applies) * 1000:.2f} ms,"
        f" render {median(renders) * 1000:.2f} ms, classify {median(decides) * 1000:.2f} ms,"
        f" total {median(total) * 1000:.2f} ms ({decision})"
    )
    parameters = {"http_routes": routes, "rules": rules}
    return [
        Result(f"route_change_delta_bytes_{routes}", median(sizes), "B", parameters),
        Result(f"route_change_agent_apply_{routes}", median(total) * 1000, "ms", parameters),
        Result(f"route_change_control_plane_{routes}", median(control) * 1000, "ms", parameters),
        Result(f"route_change_encode_{routes}", median(encodes) * 1000, "ms", parameters),
    ]


def _rules(held: Held) -> list[pb.RouteRule]:
    found = [rule for listener in held.http_listeners for rule in listener.rules]
    for group in getattr(held, "route_groups", {}).values():  # contract 2
        found += group.rules
    return found


def run(quick: bool = False) -> list[Result]:
    out: list[Result] = []
    for routes in (3000,) if quick else (3000, 10000):
        out += _one(routes)
    return out


if __name__ == "__main__":
    for figure in run(quick="--full" not in sys.argv):
        print(f"{figure.name}: {figure.value:,.2f} {figure.unit}")
