"""A rule's timeouts (`timeouts`): the backend's silence limit for the rule's requests.

`http-request set-timeout server` is a backend action (HAProxy 2.6 to 3.2 refuse it in a
frontend: "no backend capability"), so the frontend sets `txn.tmo` once the rule won and
every HTTP backend section applies it (`nodeagent/config/backend.py`), when some rule sets
it (`render.sets_timeouts`). 0 (every limit set was "0s") is HAProxy's longest timeout: no
limit in practice.
"""

from __future__ import annotations

from nodeagent.config.filters.base import FilterRenderer, RuleOutcome, refuse
from peerplane import limits
from peerplane.v1 import peerplane_pb2 as pb

VARIABLE = "txn.tmo"
SETTER = f"http-request set-var({VARIABLE}) "  # what a rule setting the variable says
# What every HTTP backend section says to apply the variable (ms, an integer).
BACKEND_LINE = (
    f"  http-request set-timeout server var({VARIABLE}) if {{ var({VARIABLE}) -m found }}"
)


def _acts(r: pb.RouteRule) -> bool:
    return r.HasField("timeouts")


def _check(r: pb.RouteRule, source: str) -> None:
    if r.timeouts.server_timeout_ms > limits.MAX_TIMEOUT_MS:
        raise refuse("server timeout", r.timeouts.server_timeout_ms, source)


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    ms = r.timeouts.server_timeout_ms or limits.MAX_TIMEOUT_MS
    return [f"  {SETTER}int({ms}) if {at.won}"]


RENDERER = FilterRenderer("timeouts", _acts, _check, _lines, refusals={})
