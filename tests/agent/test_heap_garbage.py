"""Deltas through the agent leave no cyclic garbage (`nodeagent/heap.py`): after a settle
the agent's heap is frozen, and a cycle among frozen objects that a delta replaces is
never collected until the next full snapshot; one among unfrozen objects waits for a full
collection. So nothing the agent makes on its delta path (the held snapshot's parts, the
render and route caches, the applier's files, logging, the settle's own trim) may sit in a
reference cycle.

docs/findings.md, "Agent memory: cycles on the delta path"."""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import random
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import pytest

from nodeagent.heap import TRIM_INTERVAL_S, Heap
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_client import serve, within
from tests.agent.test_delta_apply import ScriptedPlane, _delta, _full
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.deltas import delta_between, grouped, hashed
from tests.helpers.haproxy_env import backend, free_port, snapshot
from tests.helpers.stream_client import running
from tests.helpers.waiting import wait_until_async

SERVICES, ROUTES, DELTAS = 20, 30, 24
OURS = ("/nodeagent/", "/peerplane/")  # the agent's code and the shared package


def _versions(ip: str, seed: int) -> Iterator[pb.Snapshot]:
    """Hashed snapshots: Services with two endpoints and one HTTPRoute rule per host, each
    next one with an endpoint moved or a rule re-pointed (alternately)."""
    rng = random.Random(seed)
    peer_port, http_port = free_port(ip), free_port(ip)
    eps = {s: [(f"{ip}0", 8000 + s), (f"{ip}0", 9000 + s)] for s in range(SERVICES)}
    routes = {r: r % SERVICES for r in range(ROUTES)}
    for version in itertools.count(1):
        s = snapshot(
            [("pod-a", ip, peer_port)],
            [backend(f"default_svc{n:03d}_http", eps[n]) for n in range(SERVICES)],
        )
        listener = s.http_listeners.add(port=http_port)
        for r, svc in sorted(routes.items()):
            listener.rules.add(
                source=f"HTTPRoute default/r{r} rule 0 match 0",
                hostnames=[f"h{r}.example.com"],
                path=pb.PathMatch(value="/"),
                backends=[pb.WeightedBackend(backend=f"default_svc{svc:03d}_http", weight=1)],
            )
        yield hashed(grouped(s), version=version)
        if version % 2:
            n = rng.randrange(SERVICES)
            eps[n][0] = (eps[n][0][0], eps[n][0][1] + 1000)
        else:
            routes[rng.randrange(ROUTES)] = rng.randrange(SERVICES)


def _made_by_the_agent(objects: list[object]) -> Counter[str]:
    """`objects` allocated under the agent's code, by type and the innermost such line."""
    found: Counter[str] = Counter()
    for o in objects:
        traceback = tracemalloc.get_object_traceback(o)
        frames = [f for f in traceback or () if any(part in f.filename for part in OURS)]
        if frames:
            found[f"{type(o).__qualname__} at {frames[-1].filename}:{frames[-1].lineno}"] += 1
    return found


@pytest.mark.haproxy
def test_deltas_through_the_agent_leave_no_cyclic_garbage(agents: AgentHarness) -> None:
    """A full snapshot, then endpoint and route deltas over real gRPC into a real HAProxy,
    each settled (and trimmed) as the agent does; the collector off from the first settle,
    so every cycle made since stays to be found."""
    inst = agents.instance()
    ticks = itertools.count(step=TRIM_INTERVAL_S)  # every settle trims
    heap = Heap(clock=lambda: float(next(ticks)))
    versions = list(itertools.islice(_versions(inst.ip, seed=7), DELTAS + 1))
    script = [_full(versions[0])] + [
        _delta(delta_between(a, b)) for a, b in itertools.pairwise(versions)
    ]
    level = logging.getLogger().level
    logging.getLogger().setLevel(logging.INFO)  # the agent's default: its records made
    garbage: list[object] = []

    async def scenario() -> None:
        plane = ScriptedPlane(script)
        async with serve(plane, agents.port), running(agents.client(inst.applier, heap=heap)):
            first = await within(plane.answers.get(), 60)
            assert first.WhichOneof("message") == "ack"
            await wait_until_async(lambda: heap.frozen)  # the settle follows the ACK sent
            gc.disable()
            answers = [await within(plane.answers.get(), 30) for _ in script[1:]]
            assert [a.WhichOneof("message") for a in answers] == ["ack"] * DELTAS
            await wait_until_async(lambda: heap.trims == DELTAS + 1, message=lambda: heap.trims)
            gc.unfreeze()  # the frozen objects' cycles too
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            gc.set_debug(0)
            garbage.extend(gc.garbage)
            gc.garbage.clear()

    tracemalloc.start(25)
    try:
        asyncio.run(within(scenario(), 120))
        found = _made_by_the_agent(garbage)
    finally:
        tracemalloc.stop()
        gc.set_debug(0)
        gc.enable()
        gc.unfreeze()
        logging.getLogger().setLevel(level)
        garbage.clear()
    assert not found, f"cyclic garbage made by the agent over {DELTAS} deltas: {dict(found)}"
