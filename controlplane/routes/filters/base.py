"""What a filter translator gives: the snapshot's filter, or why the rule is not served."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from controlplane.model import HTTPRouteFilter, HTTPRouteRule
from controlplane.snapshot import RouteFilter


@dataclass(frozen=True, slots=True)
class Refused:
    """A filter peerplane does not serve as written: the reason said in the rejection."""

    reason: str


Translator = Callable[[HTTPRouteFilter], RouteFilter | Refused | None]
"""An HTTPRoute filter of one Gateway API type -> the snapshot's filter, a refusal, or None
when the filter lacks its type's own field (reported as an unserved type)."""

RuleTranslator = Callable[[HTTPRouteRule], RouteFilter | Refused | None]
"""An HTTPRoute rule -> the snapshot's part for one of its fields (`timeouts`), a refusal,
or None when the rule does not set the field."""
