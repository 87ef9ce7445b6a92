"""The route renderer's checks (nodeagent/config/listeners.py): every route string is matched
whole against peerplane/patterns.py before it reaches haproxy.cfg, a map file or the runtime
socket; what the maps hold and what stays in the config.

docs/design.md, "Route rendering and runtime updates"; "Untrusted strings and their sinks"."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeagent.config import listeners
from nodeagent.config.changes import classify
from nodeagent.config.render import RenderError, RenderOptions, render_held
from nodeagent.config.rules import RouteCache
from nodeagent.haproxy import HAProxyError
from nodeagent.haproxy.commands import MapUpdate
from nodeagent.haproxy.driver import map_command
from nodeagent.held import Held, diff
from peerplane import patterns
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.map_entries import entries

pytestmark = pytest.mark.unit  # pure

OPTS = RenderOptions("haproxy-a", maps_dir="/var/lib/maps")
PREFIX, EXACT = pb.PathMatch.PATH_PREFIX, pb.PathMatch.EXACT


def _rule(path: str = "/a", kind: int = PREFIX, to: str = "ns_a_80", **kw: object) -> pb.RouteRule:
    r = pb.RouteRule(source="HTTPRoute ns/r rule 0", hostnames=["a.example.com"], **kw)  # type: ignore[arg-type]
    r.path.CopyFrom(pb.PathMatch(type=kind, value=path))  # type: ignore[arg-type]
    if to:
        r.backends.add(backend=to, weight=1)
    return r


def _held(
    *rules: pb.RouteRule, port: int = 8080, default: str = "", closed: tuple[str, ...] = ()
) -> Held:
    snap = snapshot(
        [],
        [backend("ns_a_80", [("10.0.0.1", 80)]), backend("ns_b_80", [("10.0.0.2", 80)])],
        tcp=[(5432, "ns_b_80")],
    )
    snap.http_listeners.add(port=port, rules=rules, default_backend=default, closed_hosts=closed)
    return Held.from_snapshot(snap)


def _set(attr: str, value: object) -> Callable[[pb.RouteRule], None]:
    def change(r: pb.RouteRule) -> None:
        target, _, name = attr.rpartition(".")
        obj = r
        for part in filter(None, target.split(".")):
            obj = getattr(obj, part)
        if isinstance(value, list):
            getattr(obj, name).extend(value)
        else:
            setattr(obj, name, value)

    return change


NV = pb.NameValue
BAD: dict[str, Callable[[pb.RouteRule], None]] = {
    "host with newline": _set("hostnames", ["a.example.com\nfrontend x"]),
    "host upper case": _set("hostnames", ["A.example.com"]),
    "bare wildcard": _set("hostnames", ["*"]),
    "wildcard inside": _set("hostnames", ["a.*.example.com"]),
    "path with space": _set("path.value", "/a b"),
    "path with quote": _set("path.value", '/a"'),
    "path with hash": _set("path.value", "/a#x"),
    "path not absolute": _set("path.value", "a"),
    "method lower case": _set("method", "get"),
    "header name with colon": _set("headers", [NV(name="X:A", value="1")]),
    "header value with space": _set("headers", [NV(name="X-A", value="1 2")]),
    "query value with newline": _set("query_params", [NV(name="q", value="1\n")]),
    "query name with brace": _set("query_params", [NV(name="q{", value="1")]),
    "set header with backslash": _set("request_headers.set", [NV(name="X-A", value="a\\b")]),
    "remove header with space": _set("request_headers.remove", ["X A"]),
    "redirect scheme": _set("redirect.scheme", "ftp"),
    "redirect code": _set("redirect.status_code", 304),
    "redirect host": _set("redirect.hostname", "a..b"),
    "redirect path": _set("redirect.replace_full_path", "/x y"),
    "redirect prefix": _set("redirect.replace_prefix_match", "x"),
    "rewrite host": _set("url_rewrite.hostname", "a..b"),
    "rewrite path": _set("url_rewrite.path.replace_full_path", "/x#"),
    "rewrite prefix": _set("url_rewrite.path.replace_prefix_match", "/x y"),
    "response header": _set("response_headers.remove", ["X A"]),
    "prefix rewrite on an Exact match": lambda r: (
        setattr(r.path, "type", pb.PathMatch.EXACT),
        setattr(r.url_rewrite.path, "replace_prefix_match", "/x"),
    ),
    "weight": lambda r: r.backends.add(backend="ns_b_80", weight=patterns.MAX_WEIGHT + 1),
    "backend name": lambda r: r.backends.add(backend="ns_b_80 if TRUE", weight=1),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_a_bad_route_string_is_refused_with_the_rule_named(what: str) -> None:
    r = _rule()
    BAD[what](r)
    with pytest.raises(RenderError, match="invalid"):
        render_held(_held(r), OPTS)


def test_refusals_outside_a_rule() -> None:
    with pytest.raises(RenderError, match="unknown backend 'ns_x_80'"):
        render_held(_held(_rule(to="ns_x_80")), OPTS)
    with pytest.raises(RenderError, match="unknown backend 'ns_x_80'"):
        render_held(_held(_rule(), default="ns_x_80"), OPTS)
    with pytest.raises(RenderError, match="maps directory"):
        render_held(_held(_rule()), RenderOptions("haproxy-a", maps_dir="/m aps"))
    with pytest.raises(RenderError, match="TCP frontend port 5432"):
        render_held(_held(_rule(), port=5432), OPTS)
    with pytest.raises(RenderError, match="listener port"):
        render_held(_held(_rule(), port=70000), OPTS)


def test_map_rules_are_entries_and_the_rest_config_lines() -> None:
    rules = [
        _rule("/x", EXACT),
        _rule("/a/b"),
        _rule("/a", method="POST"),
        _rule("/a"),
        _rule("/"),
    ]
    out = render_held(_held(*rules), OPTS)
    exact = out.maps["/var/lib/maps/fe_8080.exact.map"]
    prefix = out.maps["/var/lib/maps/fe_8080.prefix.map"]
    assert dict(exact) == {"a.example.com/x": f"{2 * patterns.MAX_PATH + 2}:ns_a_80"}
    assert dict(prefix) == {
        "a.example.com/": "1:ns_a_80",
        "a.example.com/a/": "2:ns_a_80",
        "a.example.com/a/b/": "4:ns_a_80",
    }
    config = [ln for ln in out.frontends.splitlines() if "str(c" in ln]
    assert len(config) == 1 and "{ method POST }" in config[0] and "-m int gt 2 }" in config[0]


def test_a_layer_whose_order_maps_cannot_give_is_rendered_in_order() -> None:
    """A shorter prefix listed before a longer one: a longest-prefix lookup would pick the
    longer, so the whole host's rules become config lines in list order (first match)."""
    out = render_held(_held(_rule("/a"), _rule("/a/b", to="ns_b_80")), OPTS)
    assert not out.maps["/var/lib/maps/fe_8080.prefix.map"]
    config = [ln for ln in out.frontends.splitlines() if "str(c" in ln]
    assert [("/a/ " in ln, "/a/b/ " in ln) for ln in config] == [(True, False), (False, True)]


def test_map_commands_escape_the_separator_and_refuse_the_rest() -> None:
    path = "/var/lib/maps/fe_80.prefix.map"
    add = map_command(MapUpdate(path, "add", "a.example.com/x;y/", "4:ns_a_80"))
    assert add == f"add map {path} a.example.com/x\\;y/ 4:ns_a_80"
    assert map_command(MapUpdate(path, "del", "a.example.com/")) == f"del map {path} a.example.com/"
    for bad in (
        MapUpdate(path, "add", "a.example.com/ x", "1:b"),
        MapUpdate(path, "add", "a.example.com/\nshutdown", "1:b"),
        MapUpdate(path, "set", "a.example.com/", ""),
        MapUpdate(path, "clear", "a.example.com/"),
        MapUpdate("/var/lib/maps/x map", "add", "k", "v"),
    ):
        with pytest.raises(HAProxyError, match="refusing"):
            map_command(bad)


def test_a_map_rule_added_before_config_rules_leaves_the_config_text() -> None:
    """Config rules are named by their order among config rules, not in the whole list:
    a new map rule ranked before them is a map entry and nothing else (runtime)."""
    post = _rule("/a", method="POST")
    before = render_held(_held(post, _rule("/b")), OPTS)
    after = render_held(_held(_rule("/a/longer"), post, _rule("/b")), OPTS)
    assert after.frontends == before.frontends
    assert "a.example.com/a/longer/" in after.maps["/var/lib/maps/fe_8080.prefix.map"]


def _decide(old: Held, new: Held) -> tuple[str, str]:
    r0 = render_held(old, OPTS)
    decision = classify(old, r0, new, render_held(new, OPTS, r0), diff(old, new))
    return decision.kind.value, decision.reason


def test_what_reloads_says_why() -> None:
    """A new port or a config rule reloads, and the reason names which; a map rule's
    change is runtime (docs/design.md, the table of route changes)."""
    base = _held(_rule("/a"))
    assert _decide(base, _held(_rule("/a", to="ns_b_80"))) == (
        "runtime",
        "1 route map entry changed",
    )
    kind, why = _decide(base, _held(_rule("/a"), _rule("/b", method="GET")))
    assert kind == "reload" and why.startswith("HTTP listener 8080: rules rendered into the config")
    msg = base.message()
    msg.http_listeners.add(port=8081)
    kind, why = _decide(base, Held.from_snapshot(msg))
    assert (kind, why) == ("reload", "HTTP listener port 8081 added (a new port needs a reload)")
    deep = _rule("/a")
    deep.hostnames[:] = ["*.a.b.c.example.com"]
    assert _decide(base, _held(_rule("/a"), deep))[0] == "reload"  # a wildcard 5 labels deep


def _host_rule(host: str, path: str, to: str = "ns_a_80", **kw: object) -> pb.RouteRule:
    r = _rule(path, to=to, **kw)
    r.hostnames[:] = [host]
    return r


def test_a_layer_kept_from_the_last_render_gives_what_a_fresh_render_gives() -> None:
    """Each host layer's entries are kept while its checked rules are the same objects:
    after a change to one host (its map rule re-pointed, a config rule added to another),
    the render equals one made with nothing kept."""
    hosts = [f"h{i}.example.com" for i in range(30)]
    rules = [_host_rule(h, "/") for h in hosts]
    first = render_held(_held(*rules), OPTS)
    changed = list(rules)
    changed[3] = _host_rule(hosts[3], "/", to="ns_b_80")
    changed.insert(7, _host_rule(hosts[6], "/", method="POST"))
    kept = render_held(_held(*changed), OPTS, previous=first)
    fresh = render_held(_held(*changed), OPTS)  # a new route cache: nothing kept
    assert entries(kept.maps) == entries(fresh.maps) and kept.frontends == fresh.frontends
    prefix = kept.maps["/var/lib/maps/fe_8080.prefix.map"]
    assert prefix["h3.example.com/"].endswith(":ns_b_80")


def test_the_route_cache_travels_with_the_render_and_nowhere_else() -> None:
    """The checked rules and host layers are the render's own (no module-level state): a
    render with the previous one keeps its cache, a render without starts a new one."""
    rules = [_host_rule(f"h{i}.example.com", "/") for i in range(3)]
    first = render_held(_held(*rules), OPTS)
    cache = first.routed.route_cache
    assert len(cache.rules) == 3 and set(cache.layers) == {f"h{i}.example.com" for i in range(3)}
    moved = render_held(_held(*rules, _host_rule("h9.example.com", "/")), OPTS, previous=first)
    assert moved.routed.route_cache is cache and "h9.example.com" in cache.layers
    alone = render_held(_held(*rules), OPTS)
    assert alone.routed.route_cache is not cache and len(alone.routed.route_cache.rules) == 3
    assert len(cache.rules) == 4  # the other render left it alone


def test_closed_hosts_are_a_checked_map_and_only_the_first_one_reloads() -> None:
    """A closed host layer ends the lookup (controlplane/routes/ownership.py): its names
    are checked like rule hostnames, kept in a map, and a miss there is a 404 even with a
    default backend or annotation host routes; closing one more host is a map entry
    (runtime)."""
    with pytest.raises(RenderError, match=r"invalid closed host: 'a b\.example\.com'"):
        render_held(_held(_rule(), closed=("a b.example.com",)), OPTS)
    out = render_held(_held(_rule(), default="ns_b_80", closed=("*.a.example.com",)), OPTS)
    # a closed wildcard stops its one-label and its deeper layer (listeners.py)
    assert dict(out.maps["/var/lib/maps/fe_8080.closed.map"]) == {
        "*.a.example.com": "1",
        "**.a.example.com": "1",
    }
    assert "  http-request return status 404 if { var(txn.r) -m str x }" in (
        out.frontends.splitlines()
    )
    base = _held(_rule())
    one = _held(_rule(), closed=("a.example.com",))
    assert _decide(base, one)[0] == "reload"
    assert _decide(one, _held(_rule(), closed=("a.example.com", "b.example.com"))) == (
        "runtime",
        "1 route map entry changed",
    )


def test_a_single_label_wildcard_is_a_map_entry_of_its_one_label_layer_only() -> None:
    """An Ingress `*.foo.com` (single_label_wildcards) is keyed under `*.foo.com`, looked
    up for one label before the suffix; a Gateway API one under `**.foo.com` as well, the
    layer of deeper names. Either is a runtime map change, not a reload."""
    one = _rule("/i", single_label_wildcards=True)
    deep = _rule("/g", to="ns_b_80")
    for rule in (one, deep):
        rule.hostnames[:] = ["*.foo.com"]
    out = render_held(_held(one, deep), OPTS)
    assert dict(out.maps["/var/lib/maps/fe_8080.prefix.map"]) == {
        "**.foo.com/g/": "2:ns_b_80",
        "*.foo.com/g/": "2:ns_b_80",
        "*.foo.com/i/": "2:ns_a_80",
    }
    lines = out.frontends.splitlines()
    assert (
        "  http-request set-var(txn.k) str(**.),concat(,txn.w,) if !{ var(txn.r) -m found }"
        " { var(txn.w) -m found } { var(txn.h),field(-4,.) -m len gt 0 }" in lines
    )
    assert _decide(_held(deep), _held(one, deep)) == ("runtime", "1 route map entry changed")


@pytest.mark.parametrize(
    ("tls", "port", "redirect", "location"),
    [
        (False, 80, pb.Redirect(), "http://%[var(txn.h)]%[pathq]"),
        (False, 8080, pb.Redirect(hostname="example.org"), "http://example.org:8080%[pathq]"),
        (False, 8080, pb.Redirect(scheme="https"), "https://%[var(txn.h)]%[pathq]"),
        # On an HTTPS listener the request came in TLS: no scheme is https, its port kept.
        (True, 443, pb.Redirect(), "https://%[var(txn.h)]%[pathq]"),
        (True, 8443, pb.Redirect(hostname="example.org"), "https://example.org:8443%[pathq]"),
        (True, 443, pb.Redirect(scheme="http"), "http://%[var(txn.h)]%[pathq]"),
        (True, 443, pb.Redirect(port=80), "https://%[var(txn.h)]:80%[pathq]"),
    ],
)
def test_a_redirects_defaults_are_the_listeners_scheme_and_port(
    tls: bool, port: int, redirect: pb.Redirect, location: str
) -> None:
    listener = pb.HttpListener(port=port, rules=[_rule(to="", redirect=redirect)])
    if tls:
        listener.tls.strict_sni = True
    out = listeners.render_listeners(
        [listener], None, "/m", lambda p: f"127.0.0.1:{p}", RouteCache()
    )
    (line,) = [ln for ln in out.lines if "http-request redirect" in ln]
    assert line.startswith(f"  http-request redirect location {location} code 302 if ")


def test_a_rule_with_an_unknown_field_keeps_its_match_and_answers_500() -> None:
    """A field this agent does not know (a newer filter, or a new value of one, at any
    depth) is never ignored: the rule is no map entry, has no backend and no filter lines,
    and the render names it (`unknown_aside`); its unknown bytes never reach a line."""
    known = _rule("/new", request_headers=pb.HeaderModifier(remove=["X-Drop"]))
    unknown = pb.RouteRule.FromString(known.SerializeToString() + b"\xfa\x06\x02/x")  # 111
    nested = _rule("/moved", to="", redirect=pb.Redirect(status_code=301))
    nested.redirect.MergeFromString(b"\x4a\x02/y")  # Redirect field 9
    nested = pb.RouteRule.FromString(nested.SerializeToString())
    out = render_held(_held(unknown, nested, _rule("/ok")), OPTS)
    assert out.routed.unknown_aside == (
        (
            "HTTPRoute ns/r rule 0",
            "carries fields this agent does not know (111): answered with a 500; upgrade the agent",
        ),
        (
            "HTTPRoute ns/r rule 0",
            "carries fields this agent does not know (redirect.9): answered with a 500;"
            " upgrade the agent",
        ),
    )
    prefix = out.maps["/var/lib/maps/fe_8080.prefix.map"]
    assert dict(prefix) == {"a.example.com/ok/": "3:ns_a_80"}
    lines = out.frontends.splitlines()
    assert not [ln for ln in lines if "X-Drop" in ln or "redirect" in ln]
    for rid in ("c0", "c1"):
        assert f"  http-request set-var(txn.st) int(500) if {{ var(txn.r) -m str {rid} }}" in lines
    assert render_held(_held(known, _rule("/ok")), OPTS).routed.unknown_aside == ()
