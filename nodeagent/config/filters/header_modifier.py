"""RequestHeaderModifier (`request_headers`): set-header, add-header, del-header."""

from __future__ import annotations

from nodeagent.config.filters.base import FilterRenderer, RuleOutcome, log_format, refuse
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb


def _acts(r: pb.RouteRule) -> bool:
    m = r.request_headers
    return r.HasField("request_headers") and bool(m.set or m.add or m.remove)


def _check(r: pb.RouteRule, source: str) -> None:
    m = r.request_headers
    for nv in (*m.set, *m.add):
        if not patterns.is_header_name(nv.name) or not patterns.is_header_value(nv.value):
            raise refuse("header filter", f"{nv.name}: {nv.value}", source)
    for name in m.remove:
        if not patterns.is_header_name(name):
            raise refuse("header filter", name, source)


def _value(value: str) -> str:
    return log_format(value) if value else '""'


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    m, won = r.request_headers, at.won
    lines: list[str] = []
    for verb, pairs in (("set-header", m.set), ("add-header", m.add)):
        lines += [f"  http-request {verb} {h.name} {_value(h.value)} if {won}" for h in pairs]
    return lines + [f"  http-request del-header {name} if {won}" for name in m.remove]


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
