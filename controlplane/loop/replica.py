"""This control-plane replica: its role, whether it is ready, and why not.

Every replica watches, computes and serves. With a Lease (`--leader-elect`) only the
holder assigns slots (role "leader"); the others compute with the slot ledger the leader
wrote (role "follower"). Without one the process does everything (role "single").
Ready means synced: the informers listed, the ledger was read (followers), and a first
computation was published; until then health is NOT_SERVING and `status()` says why. A
leader (or single process) that cannot persist the ledger does not publish what it could
not write and is not ready either. A follower serving from the last good copy of a damaged
shard stays ready and lists the damage in `ledger_problems`.
`Replica` is also the reconcile loop's `SlotAuthority`. Duck-typed views of the Lease
and the ledger keep this module free of the Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from controlplane.snapshot import SlotAssignment

SINGLE, LEADER, FOLLOWER = "single", "leader", "follower"


class LeaseView(Protocol):
    """What the replica reads of its leader election (`LeaderElector` fits)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def holder(self) -> str: ...

    @property
    def identity(self) -> str: ...


class LedgerView(Protocol):
    """What the replica reads of the slot ledger watch (`kube.ledger_watch.LedgerWatch`)."""

    @property
    def read(self) -> bool: ...

    def current(self) -> LedgerVersion | None: ...

    def problem(self) -> str: ...

    def problems(self) -> list[str]: ...

    def retain(self, in_use: Collection[str]) -> None: ...


class LedgerVersion(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def assignment(self) -> SlotAssignment: ...


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """What ListWorkloads and the metrics report (proto ReplicaStatus's fields)."""

    name: str
    role: str
    leader: str
    ready: bool
    not_ready_reason: str
    # "" when ready, else "informers", "ledger", "ledger-write" or "unpublished" (metric label)
    cause: str
    ledger_version: str
    endpoints_waiting: int
    ledger_problems: tuple[str, ...] = ()


class Replica:
    """Pieces are attached as `serve` builds them; until then the replica is not ready."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lease: LeaseView | None = None
        self._ledger: LedgerView | None = None
        self._synced = False
        self._published: Callable[[], bool] = lambda: False
        self._waiting: Callable[[], Mapping[str, int]] = dict
        self._unpersisted: Callable[[], str] = str

    def attach(
        self,
        *,
        published: Callable[[], bool],
        waiting: Callable[[], Mapping[str, int]],
        lease: LeaseView | None = None,
        ledger: LedgerView | None = None,
        unpersisted: Callable[[], str] = str,
    ) -> None:
        """`unpersisted()`: why the last slot ledger write failed ("" when it did not)."""
        self._published, self._waiting = published, waiting
        self._lease, self._ledger = lease, ledger
        self._unpersisted = unpersisted

    def synced(self) -> None:
        """The source's informers have listed everything."""
        self._synced = True

    # SlotAuthority, for the reconcile loop.

    def assigning(self) -> bool:
        return self._lease is None or self._lease.is_leader

    def ledger(self) -> SlotAssignment | None:
        current = self._ledger.current() if self._ledger is not None else None
        return current.assignment if current is not None else None

    def retain(self, in_use: Collection[str]) -> None:
        if self._ledger is not None:
            self._ledger.retain(in_use)

    # What the replica reports.

    def waiting(self, workload: str) -> int:
        return self._waiting().get(workload, 0)

    def status(self) -> ReplicaStatus:
        lease, ledger = self._lease, self._ledger
        role = SINGLE if lease is None else LEADER if lease.is_leader else FOLLOWER
        current = ledger.current() if ledger is not None else None
        cause, reason = "", ""
        unpersisted = self._unpersisted()
        problems = ledger.problems() if ledger is not None else []
        if unpersisted:
            problems = [*problems, unpersisted]
        if not self._synced:
            cause, reason = "informers", "informers have not listed every object yet"
        elif ledger is not None and current is None and role != LEADER:
            cause = "ledger"
            reason = f"slot ledger not read: {ledger.problem() or 'no answer yet'}"
        elif unpersisted and role != FOLLOWER:
            # The leader cannot persist, so it withholds what it could not write: not ready.
            cause, reason = "ledger-write", f"cannot persist the slot ledger: {unpersisted}"
        elif not self._published():
            cause, reason = "unpublished", "first computation not published yet"
        return ReplicaStatus(
            # With a Lease, the identity it is held under (pod name and a suffix), so
            # `leader` names one of the replicas.
            name=lease.identity if lease is not None else self.name,
            role=role,
            leader=lease.holder if lease is not None else "",
            ready=not cause,
            not_ready_reason=reason,
            cause=cause,
            ledger_version=current.version if current is not None else "",
            endpoints_waiting=sum(self._waiting().values()),
            ledger_problems=tuple(problems),
        )
