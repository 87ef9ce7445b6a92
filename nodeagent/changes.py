"""Decide the cheapest correct way to go from the applied snapshot to a new one.

Pure. A reload costs a new worker and risks stick-table resync, so it is used only when
the change cannot be expressed as runtime API commands on pre-declared server slots.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from peerplane.v1 import peerplane_pb2 as pb


class Kind(enum.Enum):
    NOTHING = "nothing"
    RUNTIME = "runtime"
    RELOAD = "reload"


@dataclass(frozen=True)
class ServerUpdate:
    """Target state of one server slot, applied with `set server`."""

    backend: str
    server: str
    address: str
    port: int
    enabled: bool


@dataclass(frozen=True)
class Decision:
    kind: Kind
    updates: tuple[ServerUpdate, ...] = ()
    reason: str = ""


def significant(cfg: str) -> str:
    """The config without comment lines: comments never need a reload."""
    return "\n".join(line for line in cfg.splitlines() if not line.lstrip().startswith("#"))


def _without_slot_endpoints(snapshot: pb.Snapshot) -> pb.Snapshot:
    shape = pb.Snapshot()
    shape.CopyFrom(snapshot)
    shape.ClearField("version")
    shape.ClearField("content_hash")
    shape.ClearField("warnings")
    for backend in shape.backends:
        backend.ClearField("warnings")
        for slot in backend.slots:
            slot.ClearField("address")
            slot.ClearField("port")
            slot.ClearField("enabled")
    return shape


def _slot_updates(old: pb.Snapshot, new: pb.Snapshot) -> tuple[ServerUpdate, ...]:
    updates: list[ServerUpdate] = []
    for old_b, new_b in zip(old.backends, new.backends, strict=True):
        for old_s, new_s in zip(old_b.slots, new_b.slots, strict=True):
            before = (old_s.enabled, old_s.address, old_s.port) if old_s.enabled else (False,)
            after = (new_s.enabled, new_s.address, new_s.port) if new_s.enabled else (False,)
            if before != after:
                updates.append(
                    ServerUpdate(
                        new_b.name, new_s.server_name, new_s.address, new_s.port, new_s.enabled
                    )
                )
    return tuple(updates)


def classify(
    old: pb.Snapshot | None, old_cfg: str | None, new: pb.Snapshot, new_cfg: str
) -> Decision:
    """Compare applied (snapshot, rendered config) with the new ones."""
    if old is None or old_cfg is None:
        return Decision(Kind.RELOAD, reason="nothing applied yet")
    if significant(old_cfg) == significant(new_cfg):
        return Decision(Kind.NOTHING, reason="rendered config identical")
    if _without_slot_endpoints(old) != _without_slot_endpoints(new):
        return Decision(Kind.RELOAD, reason="peers, settings, backends or frontends changed")
    updates = _slot_updates(old, new)
    if not updates:
        return Decision(Kind.RELOAD, reason="rendered config changed outside the slots")
    return Decision(Kind.RUNTIME, updates, reason=f"{len(updates)} slot(s) changed")
