"""One route change's status round with many HTTPRoutes: the CPU the Lease holder spends
making the route status documents again and finding those that changed (docs/design.md,
"A route change, end to end", step 6), before and after `routes.status_round.StatusRound`,
side by side in one process.

The route table benchmark's cluster (`tests.bench.route_table`), computed by `Computer`;
then one HTTPRoute's PathPrefix changes, and one new HTTPRoute is added, `CHANGES` times
each. For each change, the same route table goes to both: before, `route_statuses` with
its `StatusMemo` and the writer's comparison of every document with the last made true;
after, `StatusRound` and the comparison of the keys its documents name as changed. The
documents are checked equal. Figures: thread CPU time (`time.thread_time`), medians, the
setup frozen out of the collector. Quick: 3,000 routes; full: 3,000 and 10,000.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import time
from collections.abc import Mapping
from typing import Any

from controlplane.compute import Computer
from controlplane.routes.status import StatusMemo, route_statuses
from controlplane.routes.status_round import StatusRound
from tests.bench.common import Result, log, median
from tests.bench.route_table import http_route, routed_cluster

CHANGES = 5


def _compared(latest: Mapping[Any, Any], written: Mapping[Any, Any], keys: Any = None) -> int:
    """The writer's comparison (`RouteStatusWriter._round`): every key, or `keys` only."""
    looked = latest.items() if keys is None else [(k, latest[k]) for k in keys if k in latest]
    return len([k for k, v in looked if (w := written.get(k)) is not v and w != v])


def _one(routes: int) -> list[Result]:
    state = routed_cluster(routes)
    computer = Computer()
    computer.compute(state, {})
    table = computer.route_table
    assert table is not None
    memo, maker = StatusMemo(), StatusRound()
    old = route_statuses(state, table=table, memo=memo)
    new = maker(state, table)
    assert dict(new) == old
    gc.collect()
    gc.freeze()
    befores, afters, made = [], [], []
    for step in range(1, 2 * CHANGES + 1):
        changed = list(state.http_routes)
        if step % 2:
            changed[7] = http_route(7, step)
        else:
            changed.append(http_route(routes + step, 0))
        state = dataclasses.replace(state, http_routes=tuple(changed))
        computer.compute(state, {})
        table = computer.route_table
        assert table is not None
        start = time.thread_time()
        documents = route_statuses(state, table=table, memo=memo)
        _compared(documents, old)
        befores.append(time.thread_time() - start)
        start = time.thread_time()
        incremental = maker(state, table)
        differing = _compared(incremental, new, incremental.changed)
        afters.append(time.thread_time() - start)
        assert dict(incremental) == documents
        made.append(differing)
        old, new = documents, incremental
    parameters = {"routes": routes, "changes": 2 * CHANGES}
    log(
        f"route status round: {routes} HTTPRoutes, one change: before "
        f"{median(befores) * 1000:.2f} ms, after {median(afters) * 1000:.3f} ms CPU "
        f"(documents that differ per change: {sorted(set(made))})"
    )
    gc.unfreeze()
    return [
        Result(f"route_status_round_before_{routes}", median(befores) * 1000, "ms", parameters),
        Result(f"route_status_round_{routes}", median(afters) * 1000, "ms", parameters),
    ]


def run(quick: bool = False) -> list[Result]:
    out: list[Result] = []
    for routes in (3000,) if quick else (3000, 10000):
        out += _one(routes)
    return out


if __name__ == "__main__":
    for figure in run(quick="--full" not in sys.argv):
        print(f"{figure.name}: {figure.value:,.3f} {figure.unit}")
