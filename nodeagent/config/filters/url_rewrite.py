"""URLRewrite (`url_rewrite`): the Host header and the path the backend gets."""

from __future__ import annotations

from nodeagent.config.filters import prefix
from nodeagent.config.filters.base import FilterRenderer, RuleOutcome, log_format, refuse
from peerplane import names, patterns
from peerplane.v1 import peerplane_pb2 as pb


def _acts(r: pb.RouteRule) -> bool:
    u = r.url_rewrite
    return r.HasField("url_rewrite") and bool(u.hostname or u.HasField("path"))


def _check(r: pb.RouteRule, source: str) -> None:
    u = r.url_rewrite
    if u.hostname and not names.is_host_name(u.hostname):
        raise refuse("rewrite hostname", u.hostname, source)
    kind = u.path.WhichOneof("path") if u.HasField("path") else None
    if kind == "replace_full_path" and not patterns.is_path(u.path.replace_full_path):
        raise refuse("rewrite path", u.path.replace_full_path, source)
    if kind == "replace_prefix_match":
        prefix.check(u.path.replace_prefix_match, r, "rewrite prefix", source)
    if u.HasField("path") and kind is None:
        raise refuse("rewrite path", "neither full path nor prefix", source)


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    """Host with `set-header`; the path with `set-path` (the query kept). The prefix
    rewrite reads `txn.p`, the path as the request came (what the rule matched)."""
    u, won = r.url_rewrite, at.won
    lines = [f"  http-request set-header host {u.hostname} if {won}"] if u.hostname else []
    kind = u.path.WhichOneof("path") if u.HasField("path") else None
    if kind == "replace_full_path":
        lines.append(f"  http-request set-path {log_format(u.path.replace_full_path)} if {won}")
    elif kind == "replace_prefix_match":
        p = prefix.replacement(u.path.replace_prefix_match, r)
        if p.head:
            lines.append(f"  http-request set-path {p.head}{p.rest} if {won}")
        else:  # stripped: the rest, or "/" when there is none
            lines += [
                f"  http-request set-path {p.rest} if {won} !{p.whole}",
                f"  http-request set-path / if {won} {p.whole}",
            ]
    return lines


RENDERER = FilterRenderer(
    "url_rewrite",
    _acts,
    _check,
    _lines,
    refusals={
        "hostname": "invalid rewrite hostname",
        "path.replace_full_path": "invalid rewrite path",
        "path.replace_prefix_match": "invalid rewrite prefix",
    },
)
