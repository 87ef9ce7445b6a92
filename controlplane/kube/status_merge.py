"""The status document to store over the one stored: what `RouteStatusWriter` writes.

Pure: a condition keeps the stored `lastTransitionTime` while its status and reason are
unchanged, else gets now; a route keeps the `parents` entries other controllers wrote, a
policy the `ancestors` entries.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]

ROUTE_KINDS = frozenset({"HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute"})
POLICY_KINDS = frozenset({"SourceIPPersistencePolicy"})
"""Kinds whose status is shared per ancestor (Gateway API PolicyAncestorStatus)."""


def rfc3339(moment: float) -> str:
    """metav1.Time: seconds precision, UTC."""
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _identity(item: Mapping[str, Any]) -> str:
    """What names an entry of a status list across writes: a listener's name, a route
    parent's parentRef and controller, a policy ancestor's ancestorRef and controller."""
    if "parentRef" in item:
        return json.dumps([item.get("parentRef"), item.get("controllerName")], sort_keys=True)
    if "ancestorRef" in item:
        return json.dumps([item.get("ancestorRef"), item.get("controllerName")], sort_keys=True)
    return json.dumps(item.get("name"))


def with_transition_times(desired: Any, stored: Any, now: str) -> Any:
    """`desired` with every condition's lastTransitionTime: the stored one when the
    condition (same type, same place) has the same status and reason, else `now`."""
    if isinstance(desired, Mapping):
        out: Obj = {}
        old = stored if isinstance(stored, Mapping) else {}
        for key, value in desired.items():
            if key == "conditions" and isinstance(value, list):
                out[key] = _conditions(value, old.get(key), now)
            else:
                out[key] = with_transition_times(value, old.get(key), now)
        return out
    if isinstance(desired, list):
        olds = (
            {_identity(item): item for item in (stored or []) if isinstance(item, Mapping)}
            if isinstance(stored, list)
            else {}
        )
        return [
            with_transition_times(
                item, olds.get(_identity(item)) if isinstance(item, Mapping) else None, now
            )
            for item in desired
        ]
    return copy.deepcopy(desired)


def _conditions(desired: list[Any], stored: Any, now: str) -> list[Any]:
    olds = {
        c.get("type"): c
        for c in (stored if isinstance(stored, list) else [])
        if isinstance(c, Mapping)
    }
    out = []
    for condition in desired:
        if not isinstance(condition, Mapping):
            out.append(copy.deepcopy(condition))
            continue
        new = dict(condition)
        old = olds.get(condition.get("type"))
        same = old is not None and (old.get("status"), old.get("reason")) == (
            condition.get("status"),
            condition.get("reason"),
        )
        time_ = old.get("lastTransitionTime") if same and old is not None else None
        new["lastTransitionTime"] = time_ if isinstance(time_, str) and time_ else now
        out.append(new)
    return out


def merged_status(
    kind: str, stored: Mapping[str, Any], desired: Mapping[str, Any], now: str, controller: str
) -> Obj:
    """The status to store: `desired` with transition times carried over; a route keeps
    the `parents` entries other controllers wrote (status is shared per parent), a policy
    the `ancestors` entries."""
    status = with_transition_times(desired, stored, now)
    shared = "parents" if kind in ROUTE_KINDS else "ancestors" if kind in POLICY_KINDS else ""
    if shared:
        ours = {controller} | {
            str(p.get("controllerName")) for p in status.get(shared) or [] if isinstance(p, Mapping)
        }
        others = [
            copy.deepcopy(p)
            for p in stored.get(shared) or []
            if isinstance(p, Mapping) and p.get("controllerName") not in ours
        ]
        status[shared] = others + list(status.get(shared) or [])
    return dict(status)
