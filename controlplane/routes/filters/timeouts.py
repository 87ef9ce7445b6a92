"""An HTTPRoute rule's `timeouts` (GEP-1742): `request` and `backendRequest` in the Gateway
API's duration format, "0s" disabling one. No filter but a rule field, carried with the
filters (docs/design.md, "Adding a route filter"); the agent enforces the smaller limit as
the backend's silence limit (`http-request set-timeout server`, docs/annotations.md).
"""

from __future__ import annotations

import re

from controlplane.model import HTTPRouteRule
from controlplane.routes.filters.base import Refused
from controlplane.settings.values import shown
from controlplane.snapshot import RouteTimeouts
from peerplane import limits

# GEP-2257: one to four components, each 1-5 digits and a unit (the CRD's own pattern).
DURATION = re.compile(r"(?:[0-9]{1,5}(?:h|m|s|ms)){1,4}")
_COMPONENT = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}


def duration_ms(text: str) -> int | None:
    """A Gateway API duration in milliseconds ("1h30m", "500ms", "0s"); None when `text`
    is not one."""
    if DURATION.fullmatch(text) is None:
        return None
    return sum(int(n) * _UNIT_MS[unit] for n, unit in _COMPONENT.findall(text))


def _limit(text: str | None, field: str) -> int | Refused | None:
    if text is None:
        return None
    ms = duration_ms(text)
    if ms is None:
        return Refused(f"{field} {shown(text, 40)} is not a Gateway API duration (1h30m, 500ms)")
    if ms > limits.MAX_TIMEOUT_MS:
        return Refused(f"{field} {text} is longer than HAProxy's longest timeout (24d20h31m23s)")
    return ms


def translate(rule: HTTPRouteRule) -> RouteTimeouts | Refused | None:
    """The rule's timeouts in milliseconds; None when it sets none; Refused for a value
    that is no duration, too long for HAProxy, or a `backendRequest` above a `request`
    that limits (the Gateway API's own rule)."""
    timeouts = rule.timeouts
    if timeouts is None or (timeouts.request is None and timeouts.backend_request is None):
        return None
    request = _limit(timeouts.request, "request")
    if isinstance(request, Refused):
        return request
    backend = _limit(timeouts.backend_request, "backendRequest")
    if isinstance(backend, Refused):
        return backend
    if request and backend is not None and backend > request:
        return Refused(
            f"backendRequest {timeouts.backend_request} exceeds request {timeouts.request}"
        )
    return RouteTimeouts(request, backend)
