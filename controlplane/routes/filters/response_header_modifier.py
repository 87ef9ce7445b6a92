"""ResponseHeaderModifier: set, add and remove the headers of the responses to a rule's
requests."""

from __future__ import annotations

from controlplane.model import HTTPRouteFilter
from controlplane.routes.filters.base import Refused
from controlplane.routes.filters.header_modifier import refusal
from controlplane.snapshot import ResponseHeaderChanges


def translate(item: HTTPRouteFilter) -> ResponseHeaderChanges | Refused | None:
    """Every name and value whole-matched by `peerplane.patterns`, or refused."""
    modifier = item.response_header_modifier
    if modifier is None:
        return None
    return refusal(modifier) or ResponseHeaderChanges(modifier.set, modifier.add, modifier.remove)
