"""Sources of cluster state: a folder of manifests or the Kubernetes API.

Every source implements `Source`: it builds `ClusterState` from the outside world and
calls `on_change` (from any thread) whenever that state may have changed. The reconcile
loop reads `state()` after the call; handlers never compute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from controlplane.model import ClusterState


class Source(Protocol):
    def start(self, on_change: Callable[[], None]) -> None:
        """Load once (blocking until the first full state is known), then watch."""

    def state(self) -> ClusterState:
        """The latest known cluster state."""

    def errors(self) -> list[str]:
        """Problems of the last load (a malformed file, a failed list), for reporting."""

    def stop(self) -> None:
        """Stop watching; idempotent."""


@runtime_checkable
class Heartbeat(Protocol):
    """A source that can tell it is stuck (the folder source: a read that blocks)."""

    def stalled(self) -> str:
        """Why the source is stuck, "" when it is not."""
