"""ResponseHeaderModifier (`response_headers`): set-header, add-header, del-header on
every response to a request the rule won.

`http-after-response`, not `http-response`: it also sees the responses HAProxy gives
itself (a redirect of the same rule, an error), and it reads the rule's `txn.r`, set by
the request rules, so it acts on the responses of its own rule only."""

from __future__ import annotations

from nodeagent.config.filters import header_modifier
from nodeagent.config.filters.base import FilterRenderer, RuleOutcome
from peerplane.v1 import peerplane_pb2 as pb


def _acts(r: pb.RouteRule) -> bool:
    return r.HasField("response_headers") and header_modifier.changes(r.response_headers)


def _check(r: pb.RouteRule, source: str) -> None:
    header_modifier.check_modifier(r.response_headers, source)


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    return header_modifier.modifier_lines("http-after-response", r.response_headers, at.won)


RENDERER = FilterRenderer(
    "response_headers",
    _acts,
    _check,
    _lines,
    refusals=header_modifier.RENDERER.refusals,
)
