"""An applier for the agent's stream tests: HAProxy is not involved, only what reached it."""

from __future__ import annotations

from nodeagent.apply.outcome import Result
from nodeagent.config.changes import ApplyPath
from nodeagent.held import ChangeSet, Held


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
