"""The canonical computation: pure functions from cluster state to snapshots.

`compute(state, previous_assignment, now=...)` is the whole contract: no I/O, no clock
(`now`, when freed slots are compared against the stick-table expire, is given by the
caller), no randomness, no protobuf. It returns typed snapshots (`WorkloadSnapshot`);
`controlplane/publish/` encodes them. Identical inputs give identical snapshots (and
content hashes) on any control-plane replica.
"""

from controlplane.compute.computer import Computer, compute
from controlplane.snapshot import (
    BackendSlots,
    BackendSpec,
    ComputeResult,
    EndpointKey,
    RejectedInput,
    SlotAssignment,
    WorkloadSnapshot,
)

__all__ = [
    "BackendSlots",
    "BackendSpec",
    "ComputeResult",
    "Computer",
    "EndpointKey",
    "RejectedInput",
    "SlotAssignment",
    "WorkloadSnapshot",
    "compute",
]
