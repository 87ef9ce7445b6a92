"""A route rule's filters on the agent: one renderer per filter (a field of the contract's
RouteRule), joined in `RENDERERS`, and the one rule of which rules can be map entries
(`map_entry_ok`). docs/design.md, "Adding a route filter".
"""

from __future__ import annotations

from nodeagent.config.filters import (
    header_modifier,
    redirect,
    response_header_modifier,
    timeouts,
    url_rewrite,
)
from nodeagent.config.filters.base import FilterRenderer, RuleOutcome
from peerplane.v1 import peerplane_pb2 as pb

RENDERERS: tuple[FilterRenderer, ...] = (
    header_modifier.RENDERER,
    url_rewrite.RENDERER,
    response_header_modifier.RENDERER,
    timeouts.RENDERER,
    redirect.RENDERER,
)
"""In the order their checks run and their lines are written: a filter that answers (the
redirect) last, since its rule's lines end with it."""


def check_filters(r: pb.RouteRule, source: str) -> None:
    """Every filter the rule carries, checked (a RenderError for the first bad value)."""
    for renderer in RENDERERS:
        if r.HasField(renderer.field):
            renderer.check(r, source)


def map_entry_ok(r: pb.RouteRule) -> bool:
    """Whether the rule can be a map entry: a host and path lookup only (no method,
    header or query match, no filter that acts) naming one backend (one served share,
    resolved). Every other rule is rendered as config lines."""
    if r.method or r.headers or r.query_params:
        return False
    if any(renderer.acts(r) for renderer in RENDERERS):
        return False
    served = [b for b in r.backends if b.weight > 0]
    return len(served) == 1 and bool(served[0].backend)


def filter_lines(r: pb.RouteRule, at: RuleOutcome) -> tuple[list[str], bool]:
    """The lines of the rule's filters once it won, and whether one answered the request
    itself (then its backends are not used)."""
    lines: list[str] = []
    for renderer in RENDERERS:
        if renderer.acts(r):
            lines += renderer.lines(r, at)
            if renderer.answers:
                return lines, True
    return lines, False
