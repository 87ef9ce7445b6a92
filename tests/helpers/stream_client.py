"""The agent's stream client in tests: an applier that records what reached it (HAProxy
is not involved), and the client run as a task for as long as a test needs it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from nodeagent.apply.outcome import Result
from nodeagent.config.changes import ApplyPath
from nodeagent.held import ChangeSet, Held
from nodeagent.stream.client import Client


class RecordingApplier:
    """Applies nothing; remembers the versions it was given and says each was applied by
    `applied_by` (the runtime API for an endpoint change, nothing for a transport test)."""

    def __init__(self, applied_by: ApplyPath = ApplyPath.NOTHING) -> None:
        self.applied: list[int] = []
        self._applied_by = applied_by

    @property
    def applied_hash(self) -> str:
        return ""

    @property
    def applied_version(self) -> int:
        return self.applied[-1] if self.applied else 0

    @property
    def applied_held(self) -> Held | None:
        return None

    def apply(self, snapshot: Held, change: ChangeSet | None = None) -> Result:
        self.applied.append(snapshot.version)
        return Result(True, self._applied_by)


@contextlib.asynccontextmanager
async def running(client: Client) -> AsyncIterator[asyncio.Task[None]]:
    """`client.run()` as a task, cancelled (and awaited, at most 10 s) on the way out."""
    task = asyncio.create_task(client.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)
