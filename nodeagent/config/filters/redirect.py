"""RequestRedirect (`redirect`): the rule answers with a redirect, never a backend."""

from __future__ import annotations

from nodeagent.config.filters import prefix
from nodeagent.config.filters.base import FilterRenderer, RuleOutcome, log_format, refuse
from peerplane import names, patterns
from peerplane.v1 import peerplane_pb2 as pb

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _acts(r: pb.RouteRule) -> bool:
    return r.HasField("redirect")


def _check(r: pb.RouteRule, source: str) -> None:
    d = r.redirect
    if d.scheme and d.scheme not in patterns.REDIRECT_SCHEMES:
        raise refuse("redirect scheme", d.scheme, source)
    if d.hostname and not names.is_host_name(d.hostname):
        raise refuse("redirect hostname", d.hostname, source)
    if d.port > 65535:
        raise refuse("redirect port", d.port, source)
    if d.status_code and d.status_code not in patterns.REDIRECT_CODES:
        raise refuse("redirect status code", d.status_code, source)
    if d.replace_full_path and not patterns.is_path(d.replace_full_path):
        raise refuse("redirect path", d.replace_full_path, source)
    if d.HasField("replace_prefix_match"):
        prefix.check(d.replace_prefix_match, r, "redirect prefix", source)


def _lines(r: pb.RouteRule, at: RuleOutcome) -> list[str]:
    """Scheme, host, port (the Gateway API's defaults: no scheme is the request's, that is
    the listener's, https where it terminates TLS; no port is the scheme's well-known one
    when a scheme is given, else the listener's), code, and the request's path (or
    ReplaceFullPath's, or the request's with its prefix replaced) and query."""
    d, won = r.redirect, at.won
    scheme = d.scheme or at.scheme
    host = d.hostname or "%[var(txn.h)]"
    to_port: int | None = d.port or (None if d.scheme else at.port)
    if to_port == _DEFAULT_PORTS[scheme]:
        to_port = None
    base = f"{scheme}://{host}" + (f":{to_port}" if to_port else "")
    code = d.status_code or 302
    if d.HasField("replace_prefix_match"):
        return _prefix_lines(base, prefix.replacement(d.replace_prefix_match, r), code, won)
    if not d.replace_full_path:
        return [f"  http-request redirect location {base}%[pathq] code {code} if {won}"]
    return _with_query(f"{base}{log_format(d.replace_full_path)}", code, won)


def _with_query(location: str, code: int, condition: str) -> list[str]:
    """A redirect to `location` with the request's query, if it has one."""
    return [
        f"  http-request redirect location {location}?%[query] code {code}"
        f" if {condition} {{ query -m len gt 0 }}",
        f"  http-request redirect location {location} code {code} if {condition}",
    ]


def _prefix_lines(base: str, p: prefix.PrefixReplacement, code: int, won: str) -> list[str]:
    if p.head:
        return _with_query(f"{base}{p.head}{p.rest}", code, won)
    # stripped: the rest, or "/" when there is none
    return _with_query(f"{base}/", code, f"{won} {p.whole}") + _with_query(
        f"{base}{p.rest}", code, won
    )


RENDERER = FilterRenderer(
    "redirect",
    _acts,
    _check,
    _lines,
    refusals={
        "scheme": "invalid redirect scheme",
        "hostname": "invalid redirect hostname",
        "replace_full_path": "invalid redirect path",
        "replace_prefix_match": "invalid redirect prefix",
    },
    answers=True,
)
