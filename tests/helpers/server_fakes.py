"""Fakes for the reconcile loop: a source the test pokes, a counting compute, a ledger."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from types import MappingProxyType

from controlplane.ledger.store import LedgerWriteError, Since
from controlplane.model import ClusterState
from controlplane.publish.store import SnapshotStore
from controlplane.snapshot import (
    BackendSlots,
    BackendSpec,
    ComputeResult,
    Peer,
    PeerSection,
    RejectedInput,
    SlotAssignment,
    WorkloadSnapshot,
)
from tests.helpers.server_harness import NS, W1


class FakeSource:
    """A Source whose changes the test triggers by calling `on_change` itself."""

    def __init__(self) -> None:
        self.on_change: Callable[[], None] | None = None
        self.stopped = False
        self.problems: list[str] = []

    def start(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change

    def state(self) -> ClusterState:
        return ClusterState()

    def errors(self) -> list[str]:
        return list(self.problems)

    def stop(self) -> None:
        self.stopped = True


def assignment_for(addresses: tuple[str, ...]) -> SlotAssignment:
    slots = {(a, 8888): i for i, a in enumerate(addresses, start=1)}
    return {"default_shop_http": BackendSlots(42, MappingProxyType(slots))}


def workload_snapshot(workload: str, *addresses: str) -> WorkloadSnapshot:
    """The typed form of `server_harness.snapshot(workload, *addresses)`: it encodes to
    the same bytes."""
    backend = BackendSpec(
        name="default_shop_http",
        service="default/shop",
        service_port="",
        mode="http",
        balance="source",
        balance_argument="",
        hash_type="",
        persistence=None,
        slots=BackendSlots(
            len(addresses), MappingProxyType({(a, 8888): i for i, a in enumerate(addresses, 1)})
        ),
        warnings=(),
        check=None,
    )
    peers = PeerSection("localinstance", 10000, (Peer("haproxy-a", "127.0.1.1", 10000),))
    return WorkloadSnapshot(workload, peers, (backend,), None, (), ())


class FakeCompute:
    """compute(): one workload whose slots follow `addresses`; counts and times calls."""

    def __init__(self) -> None:
        self.addresses: tuple[str, ...] = ("10.0.0.1",)
        self.rejections: tuple[RejectedInput, ...] = ()
        self.fail = False
        self.calls: list[float] = []  # time.monotonic() of each call
        self.previous: list[SlotAssignment] = []
        self.assigning: list[bool] = []  # the `assign_new` each call was given
        self.nows: list[float] = []  # the `now` each call was given
        self.recompute_at = math.inf  # ComputeResult.recompute_at of every answer
        self._lock = threading.Lock()

    def __call__(
        self,
        state: ClusterState,
        previous: SlotAssignment,
        *,
        now: float = 0.0,
        assign_new: bool = True,
    ) -> ComputeResult:
        with self._lock:
            self.calls.append(time.monotonic())
            self.previous.append(previous)
            self.assigning.append(assign_new)
            self.nows.append(now)
        if self.fail:
            raise RuntimeError("compute exploded")
        return ComputeResult(
            workloads={W1: workload_snapshot(W1, *self.addresses)},
            assignment=assignment_for(self.addresses),
            rejections=self.rejections,
            pod_workloads={f"{NS}/haproxy-a": W1},
            recompute_at=self.recompute_at,
        )


class RecordingLedger:
    """A `SlotLedger` recording every save with the version the store had published at
    that moment."""

    def __init__(self, store: SnapshotStore, initial: SlotAssignment | None = None) -> None:
        self._store = store
        self.initial: SlotAssignment = initial or {}
        self.saves: list[tuple[SlotAssignment, int]] = []
        self.failures_left = 0
        # Failures name these backends unwritten (the others written), as a sharded
        # ledger's do; None: a whole-ledger failure.
        self.unwritten: frozenset[str] | None = None
        self._dirty = False

    def load(self) -> tuple[SlotAssignment, list[str]]:
        return self.initial, ["state file had a bad line"]

    def save(self, assignment: SlotAssignment, since: Since | None = None) -> None:
        if self.failures_left:
            self.failures_left -= 1
            if self.unwritten is not None:  # a shard each: all others were written
                self._dirty = True  # the unwritten ones are written by the next save
                raise LedgerWriteError(
                    "cannot write slot ledger shard: HTTP 403 exceeded quota",
                    cause="forbidden",
                    permanent=True,
                    unwritten=self.unwritten,
                )
            raise OSError("disk full")
        published = self._store.get(W1)
        self.saves.append((assignment, published.version if published else 0))
        self._dirty = False

    def dirty(self) -> bool:
        return self._dirty
