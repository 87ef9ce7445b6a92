"""Whether every connected agent holds its workload's current publication, and a wait for
it from another thread: the route status writer waits (bounded) before a round, so its
API reads and writes, and the API server's work on them, come after the agents applied
the change rather than beside them (docs/findings.md, "A route change through a real API
server, stage by stage")."""

from __future__ import annotations

import asyncio
import concurrent.futures

from controlplane.publish.store import SnapshotStore
from controlplane.server.agents import AgentRegistry
from controlplane.server.protocol import StreamState


def refused(state: StreamState, content_hash: str) -> bool:
    """The agent answered `content_hash` with a Nack and nothing is owed it: it will not
    hold that content until a newer one is published (a full snapshot owed after a delta's
    Nack with resync is still to come, so it is not refused yet)."""
    nacked = state.nacked
    return (
        state.pending is None
        and not state.resync
        and nacked is not None
        and nacked.content_hash == content_hash
    )


def fleet_holds_current(registry: AgentRegistry, store: SnapshotStore) -> bool:
    """Every connected agent of a published workload acknowledged its current content
    (an agent of no workload, or one not published yet, is not waited for; nor is one
    that refused the current content: waiting for it would hold every namespace's status
    writes back by the whole timeout, round after round)."""
    for session in registry.sessions():
        published = store.get(session.workload) if session.workload else None
        if published is None or session.acked_hash == published.content_hash:
            continue
        if not refused(session.state, published.content_hash):
            return False
    return True


class DeliveryWait:
    """`wait(timeout)` from any thread but the loop's: blocks until `fleet_holds_current`
    (checked on the loop, where the sessions change) or `timeout` seconds passed; whether
    it holds."""

    def __init__(
        self, registry: AgentRegistry, store: SnapshotStore, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._registry = registry
        self._store = store
        self._loop = loop

    def __call__(self, timeout: float) -> bool:
        waiting = self._registry.wait_until(
            lambda: fleet_holds_current(self._registry, self._store), timeout
        )
        try:
            future = asyncio.run_coroutine_threadsafe(waiting, self._loop)
        except RuntimeError:  # the loop is closed: shutting down
            waiting.close()
            return False
        try:
            future.result(timeout + 1.0)
        except (TimeoutError, concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            future.cancel()
            return False
        return True
