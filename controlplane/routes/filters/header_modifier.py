"""RequestHeaderModifier: set, add and remove request headers before the backend."""

from __future__ import annotations

from controlplane.model import HeaderModifier, HTTPRouteFilter
from controlplane.routes.filters.base import Refused
from controlplane.snapshot import HeaderChanges
from peerplane import patterns


def refusal(modifier: HeaderModifier) -> Refused | None:
    """Why the modifier is not served: a name or value `peerplane.patterns` does not
    whole-match; None when every one does (shared with ResponseHeaderModifier)."""
    pairs = [*modifier.set, *modifier.add]
    if not all(
        patterns.is_header_name(n) and patterns.is_header_value(v) for n, v in pairs
    ) or not all(patterns.is_header_name(n) for n in modifier.remove):
        return Refused("a header name or value peerplane does not serve")
    return None


def translate(item: HTTPRouteFilter) -> HeaderChanges | Refused | None:
    """Every name and value whole-matched by `peerplane.patterns`, or refused."""
    modifier = item.request_header_modifier
    if modifier is None:
        return None
    return refusal(modifier) or HeaderChanges(modifier.set, modifier.add, modifier.remove)
