"""RequestHeaderModifier (`request_headers`): set-header, add-header, del-header."""

from __future__ import annotations

from nodeagent.config.filters.base import FilterRenderer, RuleOutcome, log_format, refuse
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb


def changes(m: pb.HeaderModifier) -> bool:
    """Whether the modifier changes anything."""
    return bool(m.set or m.add or m.remove)


def _acts(r: pb.RouteRule) -> bool:
    return r.HasField("request_headers") and changes(r.request_headers)


def check_modifier(m: pb.HeaderModifier, source: str) -> None:
    """Every name and value whole-matched by `peerplane.patterns` (request or response)."""
    for nv in (*m.set, *m.add):
        if not patterns.is_header_name(nv.name) or not patterns.is_header_value(nv.value):
            raise refuse("header filter", f"{nv.name}: {nv.value}", source)
    for name in m.remove:
        if not patterns.is_header_name(name):
            raise refuse("header filter", name, source)


def _check(r: pb.RouteRule, source: str) -> None:
    check_modifier(r.request_headers, source)


def _value(value: str) -> str:
    return log_format(value) if value else '""'


def modifier_lines(rules: str, m: pb.HeaderModifier, won: str) -> list[str]:
    """The modifier as `rules` (`http-request`, `http-after-response`) lines."""
    lines: list[str] = []
    for verb, pairs in (("set-header", m.set), ("add-header", m.add)):
        lines += [f"  {rules} {verb} {h.name} {_value(h.value)} if {won}" for h in pairs]
    return lines + [f"  {rules} del-header {name} if {won}" for name in m.remove]


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    return modifier_lines("http-request", r.request_headers, at.won)


RENDERER = FilterRenderer(
    "request_headers",
    _acts,
    _check,
    _lines,
    refusals={
        "set.name": "invalid header filter",
        "set.value": "invalid header filter",
        "add.name": "invalid header filter",
        "add.value": "invalid header filter",
        "remove": "invalid header filter",
    },
)
