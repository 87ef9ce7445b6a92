"""Decide the cheapest correct way to go from the applied snapshot to a new one.

Pure, and O(changed parts): only the backends and sections a `ChangeSet` names are
looked at. A reload costs a new worker and risks stick-table resync, so it is used only when
the change cannot be expressed as runtime API commands on pre-declared server slots.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodeagent.config.render import Rendered
from nodeagent.held import ChangeSet, Held
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


def _shape(backend: pb.Backend) -> pb.Backend:
    """The backend without what the runtime API changes (slot address, port, enabled)
    and what is never rendered (warnings)."""
    shape = pb.Backend()
    shape.CopyFrom(backend)
    shape.ClearField("warnings")
    for slot in shape.slots:
        slot.ClearField("address")
        slot.ClearField("port")
        slot.ClearField("enabled")
    return shape


def _slot_updates(old_b: pb.Backend, new_b: pb.Backend) -> list[ServerUpdate]:
    updates: list[ServerUpdate] = []
    for old_s, new_s in zip(old_b.slots, new_b.slots, strict=True):
        before = (old_s.enabled, old_s.address, old_s.port) if old_s.enabled else (False,)
        after = (new_s.enabled, new_s.address, new_s.port) if new_s.enabled else (False,)
        if before != after:
            updates.append(
                ServerUpdate(
                    new_b.name, new_s.server_name, new_s.address, new_s.port, new_s.enabled
                )
            )
    return updates


def classify(
    old: Held | None,
    old_cfg: Rendered | None,
    new: Held,
    new_cfg: Rendered,
    change: ChangeSet,
) -> Decision:
    """From the applied snapshot and its rendering to the new ones, looking only at the
    parts in `change` (what differs between the two): O(changed backends)."""
    if old is None or old_cfg is None:
        return Decision(Kind.RELOAD, reason="nothing applied yet")
    if change.peers and old_cfg.peers != new_cfg.peers:
        return Decision(Kind.RELOAD, reason="peers changed")
    if change.frontends and old_cfg.frontends != new_cfg.frontends:
        return Decision(Kind.RELOAD, reason="frontends changed")
    if change.removed:
        return Decision(Kind.RELOAD, reason=f"{len(change.removed)} backend(s) removed")
    updates: list[ServerUpdate] = []
    for name in sorted(change.backends):
        if name not in old.backends:
            return Decision(Kind.RELOAD, reason=f"backend {name} added")
        if old_cfg.encoded[name] == new_cfg.encoded[name]:
            continue  # a change nothing renders (warnings, a free slot's address)
        old_b, new_b = old.backends[name], new.backends[name]
        if _shape(old_b) != _shape(new_b):
            return Decision(Kind.RELOAD, reason=f"backend {name} settings or slots changed")
        found = _slot_updates(old_b, new_b)
        if not found:
            return Decision(Kind.RELOAD, reason=f"backend {name} changed outside the slots")
        updates += found
    if not updates:
        return Decision(Kind.NOTHING, reason="rendered config identical")
    return Decision(Kind.RUNTIME, tuple(updates), reason=f"{len(updates)} slot(s) changed")
