"""The route model on a real HAProxy (each installed version): a routing table built by
hand (the Gateway API's precedence examples, wildcards, weights, filters, Ingress-style
paths, default backend, 404), and routes added, re-pointed and removed on a running
HAProxy through the agent without a reload and without a failed request.

docs/design.md, "Route rendering and runtime updates"."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent.apply import saved
from nodeagent.config.changes import ApplyPath
from nodeagent.config.listeners import map_file
from nodeagent.config.render import Rendered, render_held
from nodeagent.haproxy import sockrepair
from nodeagent.haproxy.commands import MapUpdate
from nodeagent.haproxy.driver import command
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_socket_repair import silent_socket
from tests.helpers.deltas import grouped
from tests.helpers.haproxy_env import Instance, backend, free_port, loopback_net, running_instance
from tests.helpers.haproxy_env import snapshot as make_snapshot
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

PREFIX, EXACT = pb.PathMatch.PATH_PREFIX, pb.PathMatch.EXACT
NAMES = ("a", "b", "c")


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers with its name, the path it was asked and the request headers it got."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms wait per reply

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        doc = {"name": self.server.name, "path": self.path, "headers": headers}  # type: ignore[attr-defined]
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _EchoServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, name: str, address: tuple[str, int]) -> None:
        self.name = name
        super().__init__(address, _Echo)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # HAProxy closing an idle connection at the end is no news


@contextlib.contextmanager
def echo_servers(net: str) -> Iterator[dict[str, tuple[str, int]]]:
    """One echo backend per name on its own address (.11, .12, ...)."""
    servers = [_EchoServer(n, (f"{net}.{11 + i}", 0)) for i, n in enumerate(NAMES)]
    threads = [threading.Thread(target=s.serve_forever, args=(0.05,)) for s in servers]
    for t in threads:
        t.start()
    try:
        yield {s.name: (s.server_address[0], s.server_address[1]) for s in servers}  # type: ignore[misc]
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
        for t in threads:
            t.join(5)


@dataclass
class Reply:
    status: int
    name: str
    path: str
    headers: dict[str, str]
    location: str
    response_headers: dict[str, list[str]]


@dataclass
class Site:
    """One agent-managed HAProxy with three echo backends `ns_a_80`, `ns_b_80`, `ns_c_80`."""

    inst: Instance
    ends: dict[str, tuple[str, int]]
    peer_port: int
    ports: tuple[int, int]

    def snapshot(
        self,
        listeners: list[pb.HttpListener],
        version: int,
        annotation: list[tuple[str, str]] | None = None,
    ) -> pb.Snapshot:
        backends = [
            backend(f"ns_{n}_80", [self.ends[n]], balance="roundrobin", persistence=False)
            for n in NAMES
        ]
        snap = make_snapshot(
            [("pod-a", self.inst.ip, self.peer_port)],
            backends,
            http_port=self.ports[0] if annotation is not None else None,
            routes=annotation or (),
            version=version,
        )
        snap.http_listeners.extend(listeners)
        return grouped(snap)  # as the control plane sends it (contract 2)

    def request(
        self,
        host: str,
        path: str,
        method: str = "GET",
        headers: dict[str, str] | None = None,
        port: int | None = None,
        conn: http.client.HTTPConnection | None = None,
    ) -> Reply:
        own = conn is None
        c = conn or http.client.HTTPConnection(self.inst.ip, port or self.ports[0], timeout=5)
        try:
            body = b"x" if method == "POST" else None
            c.request(method, path, body=body, headers={"Host": host, **(headers or {})})
            r = c.getresponse()
            data = r.read()
            doc = json.loads(data) if r.getheader("Content-Type") == "application/json" else {}
            return Reply(
                r.status,
                doc.get("name", ""),
                doc.get("path", ""),
                doc.get("headers", {}),
                r.getheader("Location") or "",
                {k.lower(): r.headers.get_all(k) or [] for k in r.headers},
            )
        finally:
            if own:
                c.close()

    def served_by(self, host: str, path: str, **kw: object) -> str:
        reply = self.request(host, path, **kw)  # type: ignore[arg-type]
        return reply.name if reply.status == 200 else str(reply.status)


@pytest.fixture
def site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Site]:
    net = loopback_net()
    with (
        echo_servers(net) as ends,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        ports = (free_port(inst.ip), free_port(inst.ip))
        yield Site(inst, ends, free_port(inst.ip), ports)


def rule(
    hosts: list[str],
    to: str | list[tuple[str, int]] = "",
    path: str | None = None,
    kind: int = PREFIX,
    source: str = "",
    **kw: object,
) -> pb.RouteRule:
    """One rule; `to` is a backend letter or (letter or "" for unresolved, weight) pairs."""
    r = pb.RouteRule(source=source or f"HTTPRoute ns/r {path}", hostnames=hosts, **kw)  # type: ignore[arg-type]
    if path is not None:
        r.path.CopyFrom(pb.PathMatch(type=kind, value=path))  # type: ignore[arg-type]
    pairs = [(to, 1)] if isinstance(to, str) and to else (to if isinstance(to, list) else [])
    for name, weight in pairs:
        r.backends.add(backend=f"ns_{name}_80" if name else "", weight=weight)
    return r


def nv(**pairs: str) -> list[pb.NameValue]:
    return [pb.NameValue(name=k.replace("_", "-"), value=v) for k, v in pairs.items()]


P = "p.example.com"


def gateway_listener(port: int) -> pb.HttpListener:
    """Rules in the precedence order compute gives them (Gateway API: exact host over
    wildcards, longer wildcard first; Exact path, longest prefix, method, more header
    matches, more query matches, oldest route first)."""
    return pb.HttpListener(
        port=port,
        rules=[
            rule([P], "a", "/api", EXACT),
            rule([P], "b", "/api/v2"),
            rule([P], "c", "/api", method="POST"),
            rule([P], "a", "/api", headers=nv(X_Env="canary", X_Team="red")),
            rule([P], "b", "/api", headers=nv(X_Env="canary")),
            rule([P], "a", "/api", query_params=nv(v="2", w="1")),
            rule([P], "b", "/api", query_params=nv(v="2")),
            rule([P], "c", "/api"),
            rule([P], "a", "/tie", headers=nv(X_One="1"), source="older route"),
            rule([P], "b", "/tie", headers=nv(X_Two="1"), source="newer route"),
            rule(
                [P],
                path="/old",
                redirect=pb.Redirect(scheme="https", status_code=301, replace_full_path="/new"),
            ),
            rule(
                [P],
                "b",
                "/hdr",
                request_headers=pb.HeaderModifier(
                    set=nv(X_Set="50%"), add=nv(X_Add="yes"), remove=["X-Drop"]
                ),
            ),
            rule(
                [P],
                "b",
                "/rw",
                url_rewrite=pb.URLRewrite(
                    hostname="rw.example.org", path=pb.PathRewrite(replace_prefix_match="/new")
                ),
                response_headers=pb.HeaderModifier(
                    set=nv(X_Resp="1"), add=nv(X_More="2"), remove=["Server"]
                ),
            ),
            rule(
                [P],
                path="/moved",
                redirect=pb.Redirect(status_code=308, replace_prefix_match="/to"),
            ),
            rule(["*.w.example.com"], "a"),
            rule(["*.example.com"], "b"),
            rule([], [("a", 1), ("b", 3)], "/weights"),
            rule([], [("b", 1), ("", 1)], "/half"),
        ],
    )


def ingress_listener(port: int) -> pb.HttpListener:
    return pb.HttpListener(
        port=port,
        rules=[
            rule(["i.example.com"], "b", "/bar", EXACT, source="Ingress ns/i rule 0 path 1"),
            rule(["i.example.com"], "a", "/foo", source="Ingress ns/i rule 0 path 0"),
        ],
        default_backend="ns_c_80",
    )


def test_the_routing_table_on_haproxy(site: Site) -> None:
    port, ingress_port = site.ports
    snap = site.snapshot(
        [gateway_listener(port), ingress_listener(ingress_port)],
        1,
        annotation=[("legacy.example.com", "ns_c_80"), ("legacy.example.org", "ns_c_80")],
    )
    result = site.inst.applier.apply(snap)
    assert result.ok, result.error
    saved = site.inst.applier.store.load()  # what a restarted agent restores
    assert saved is not None and list(saved.http_listeners) == list(snap.http_listeners)
    assert list(saved.route_groups) == list(snap.route_groups) and snap.route_groups
    maps = site.inst.applier.options.maps_dir
    files = [f"fe_{p}.{kind}.map" for p in (port, ingress_port) for kind in ("exact", "prefix")]
    assert sorted(os.listdir(maps)) == sorted([*files, f"fe_{port}.hosts.map"])
    table = [
        # (host, path, extra, expected backend or status)
        (P, "/api", {}, "a"),  # Exact over PathPrefix
        (P, "/api/v2/x", {}, "b"),  # longest prefix
        (P, "/api/x", {"method": "POST"}, "c"),  # method
        (P, "/api/x", {"headers": {"X-Env": "canary", "X-Team": "red"}}, "a"),  # more headers
        (P, "/api/x", {"headers": {"X-Env": "canary"}}, "b"),
        (P, "/api/x?v=2&w=1", {}, "a"),  # more query matches
        (P, "/api/x?v=2", {}, "b"),
        (P, "/api/x", {}, "c"),
        (P, "/api/v2", {"method": "POST"}, "b"),  # the longer prefix beats the method
        (P, "/tie", {"headers": {"X-One": "1", "X-Two": "1"}}, "a"),  # oldest route first
        (P, "/tie", {"headers": {"X-Two": "1"}}, "b"),
        (P, "/zzz", {}, "b"),  # the exact host has no match: *.example.com does
        ("x.w.example.com", "/", {}, "a"),  # wildcard, one label
        ("y.x.w.example.com", "/", {}, "a"),  # two labels
        ("w.example.com", "/", {}, "b"),  # not the bare suffix: the shorter wildcard
        ("example.com", "/", {}, "404"),  # neither wildcard
        ("legacy.example.com", "/", {}, "b"),  # a listener rule ranks before annotations
        ("legacy.example.org", "/", {}, "c"),  # the annotation route, merged, last
        ("nothing.org", "/zzz", {}, "404"),
        ("P.Example.Com:1234", "/api", {}, "a"),  # host: case and port ignored
    ]
    got = [(h, p, site.served_by(h, p, **kw)) for h, p, kw, _ in table]
    assert got == [(h, p, want) for h, p, _, want in table]
    # Ingress-style on the other port: Prefix is element-wise; Exact; default backend.
    ingress = [("/foo", "a"), ("/foo/bar", "a"), ("/foobar", "c"), ("/bar", "b"), ("/bar/", "c")]
    got_i = [(p, site.served_by("i.example.com", p, port=ingress_port)) for p, _ in ingress]
    assert got_i == ingress
    assert site.served_by("other.org", "/foo", port=ingress_port) == "c"
    # RequestRedirect (ReplaceFullPath keeps the query) and RequestHeaderModifier.
    moved = site.request(P, "/old/x?q=1")
    assert (moved.status, moved.location) == (301, f"https://{P}/new?q=1")
    assert site.request(P, "/old").location == f"https://{P}/new"
    seen = site.request(P, "/hdr/x", headers={"X-Drop": "1", "X-Set": "old"})
    assert seen.name == "b" and seen.path == "/hdr/x"
    assert seen.headers["x-set"] == "50%" and seen.headers["x-add"] == "yes"
    assert "x-drop" not in seen.headers
    # Weights: 2,000 requests within 5 points of 1:3; an unresolved share is a 500.
    conn = http.client.HTTPConnection(site.inst.ip, port, timeout=5)
    try:
        shares = Counter(site.request("any.org", "/weights", conn=conn).name for _ in range(2000))
        half = Counter(site.request("any.org", "/half", conn=conn).status for _ in range(400))
    finally:
        conn.close()
    assert sum(shares.values()) == 2000 and set(shares) == {"a", "b"}
    assert abs(shares["a"] / 2000 - 0.25) < 0.05, shares
    assert set(half) == {200, 500} and abs(half[500] / 400 - 0.5) < 0.1, half


def test_rewrites_prefix_redirects_and_response_headers_on_haproxy(site: Site) -> None:
    """URLRewrite (host, full path, ReplacePrefixMatch with the Gateway API's trailing
    "/" cases), RequestRedirect ReplacePrefixMatch with 303/307/308, and
    ResponseHeaderModifier on the responses of its own rule only (a backend's and a
    redirect's)."""
    port = site.ports[0]

    def prefix_to(value: str) -> pb.URLRewrite:
        return pb.URLRewrite(path=pb.PathRewrite(replace_prefix_match=value))

    listener = pb.HttpListener(
        port=port,
        rules=[
            rule([P], "a", "/prefix/one", url_rewrite=prefix_to("/one")),
            rule([P], "a", "/strip-prefix", url_rewrite=prefix_to("/")),
            rule([P], "a", "/slash", url_rewrite=prefix_to("/xyz/")),
            rule(
                [P],
                "a",
                "/full/one",
                url_rewrite=pb.URLRewrite(path=pb.PathRewrite(replace_full_path="/one")),
            ),
            rule([P], "b", "/host", url_rewrite=pb.URLRewrite(hostname="one.example.org")),
            rule(
                [P],
                "c",
                "/resp",
                response_headers=pb.HeaderModifier(
                    set=nv(X_Set="50%"), add=nv(X_Add="1"), remove=["Server"]
                ),
            ),
            rule(
                [P],
                path="/orig",
                redirect=pb.Redirect(status_code=307, replace_prefix_match="/repl"),
            ),
            rule(
                [P],
                path="/gone",
                redirect=pb.Redirect(
                    hostname="example.org", status_code=308, replace_prefix_match=""
                ),
                response_headers=pb.HeaderModifier(set=nv(X_Moved="yes")),
            ),
            rule([P], path="/see", redirect=pb.Redirect(status_code=303)),
            rule([P], "c"),
        ],
    )
    result = site.inst.applier.apply(site.snapshot([listener], 1))
    assert result.ok, result.error
    backend_saw = [
        # (path asked, backend, path the backend got)
        ("/prefix/one/two", "a", "/one/two"),
        ("/prefix/one", "a", "/one"),
        ("/prefix/one/", "a", "/one/"),
        ("/prefix/one/x?q=1", "a", "/one/x?q=1"),
        ("/prefix/onetwo", "c", "/prefix/onetwo"),  # element-wise: not its prefix
        ("/strip-prefix/three", "a", "/three"),
        ("/strip-prefix", "a", "/"),
        ("/strip-prefix/", "a", "/"),
        ("/strip-prefix?q=1", "a", "/?q=1"),
        ("/slash/bar", "a", "/xyz/bar"),
        ("/slash", "a", "/xyz"),
        ("/slash/", "a", "/xyz/"),
        ("/full/one/two?q=1", "a", "/one?q=1"),
        ("/host/x", "b", "/host/x"),
    ]
    got = [(p, *(lambda r: (r.name, r.path))(site.request(P, p))) for p, _, _ in backend_saw]
    assert got == backend_saw
    assert site.request(P, "/host/x").headers["host"] == "one.example.org"
    assert site.request(P, "/prefix/one").headers["host"] == P
    modified = site.request(P, "/resp/x")
    assert modified.name == "c"
    assert modified.response_headers["x-set"] == ["50%"]
    assert modified.response_headers["x-add"] == ["1"]
    assert "server" not in modified.response_headers
    other = site.request(P, "/other")  # another rule's response keeps its headers
    assert other.name == "c" and "server" in other.response_headers
    assert "x-set" not in other.response_headers
    base = f"http://{P}:{port}"
    redirects = [
        ("/orig/lemon?a=b", 307, f"{base}/repl/lemon?a=b"),
        ("/orig", 307, f"{base}/repl"),
        ("/gone", 308, f"http://example.org:{port}/"),
        ("/gone/x/y", 308, f"http://example.org:{port}/x/y"),
        ("/see/x?q=1", 303, f"{base}/see/x?q=1"),
    ]
    got_r = [(p, *(lambda r: (r.status, r.location))(site.request(P, p))) for p, _, _ in redirects]
    assert got_r == redirects
    assert site.request(P, "/gone").response_headers.get("x-moved") == ["yes"]
    assert "x-moved" not in site.request(P, "/see/x").response_headers


def newer(r: pb.RouteRule, field: int, inside: str = "") -> pb.RouteRule:
    """`r` as a control plane newer than this agent sends it: with a field (a filter, or a
    filter's value `inside` one of its messages) this contract does not know."""
    tag, varint = field << 3 | 2, bytearray()  # a length-delimited field: "/x"
    while tag > 0x7F:
        varint.append(tag & 0x7F | 0x80)
        tag >>= 7
    unknown = bytes([*varint, tag, 2]) + b"/x"
    out = pb.RouteRule()
    out.CopyFrom(r)
    if inside:
        getattr(out, inside).MergeFromString(unknown)
    else:
        out.MergeFromString(unknown)
    return out


def test_a_rule_with_fields_the_agent_does_not_know_is_set_aside_alone(site: Site) -> None:
    """An agent older than a filter would serve the rule without it: the rule keeps its
    match and answers 500, the ACK's set-aside parts name it, every other rule is served;
    the same rule without the unknown field is served again."""
    port = site.ports[0]
    moved = rule(
        [P], path="/moved", redirect=pb.Redirect(status_code=301), source="HTTPRoute ns/moved"
    )

    def listener(*extra: pb.RouteRule) -> pb.HttpListener:
        return pb.HttpListener(port=port, rules=[*extra, rule([P], "b", "/ok"), rule([P], "c")])

    unknown = listener(newer(rule([P], "a", "/new"), 99), newer(moved, 9, inside="redirect"))
    result = site.inst.applier.apply(site.snapshot([unknown], 1))
    assert result.ok, result.error
    # The ACK names the parts by kind, then name.
    assert [(p.kind, p.name, p.reason) for p in result.set_aside] == [
        (
            "route-rule",
            "HTTPRoute ns/moved",
            "carries fields this agent does not know (redirect.9): answered with a 500;"
            " upgrade the agent",
        ),
        (
            "route-rule",
            "HTTPRoute ns/r /new",
            "carries fields this agent does not know (99): answered with a 500; upgrade the agent",
        ),
    ]
    served = [site.served_by(P, p) for p in ("/new/x", "/moved", "/ok", "/other")]
    assert served == ["500", "500", "b", "c"]
    again = site.inst.applier.apply(site.snapshot([listener(rule([P], "a", "/new"), moved)], 2))
    assert again.ok and again.set_aside == (), again
    assert site.served_by(P, "/new/x") == "a"
    assert site.request(P, "/moved").status == 301


def test_routes_change_on_a_running_haproxy_without_a_reload(site: Site) -> None:
    """Added, re-pointed and removed under a request loop: runtime map commands, the same
    worker, no failed request; the map files say the same, so a reload keeps routing."""
    port = site.ports[0]

    def listener(*extra: pb.RouteRule) -> pb.HttpListener:
        return pb.HttpListener(port=port, rules=[rule([P], "a", "/stable"), *extra])

    inst = site.inst
    first = inst.applier.apply(site.snapshot([listener()], 1))
    assert first.ok, first.error
    before = inst.haproxy.show_proc()
    failures: list[str] = []
    served = 0
    stop = threading.Event()

    def load() -> None:
        nonlocal served
        while not stop.is_set():
            try:
                reply = site.request(P, "/stable")
                if (reply.status, reply.name) != (200, "a"):
                    failures.append(f"{reply.status} {reply.name}")
            except OSError as e:
                failures.append(repr(e))
            served += 1

    loop = threading.Thread(target=load)
    loop.start()
    try:
        steps = [
            (listener(rule([P], "b", "/new")), "b"),  # added
            (listener(rule([P], "c", "/new")), "c"),  # re-pointed
            (listener(rule(["*.example.com"], "b", "/new")), "b"),  # moved to a wildcard
            (listener(), "404"),  # removed
        ]
        for version, (new, want) in enumerate(steps, start=2):
            wait_until(lambda v=version: served >= 50 * (v - 1), 10)  # load between
            result = inst.applier.apply(site.snapshot([new], version))
            assert result.ok, result.error
            assert result.kind is ApplyPath.RUNTIME, result
            assert site.served_by(P, "/new") == want
        assert site.served_by("w.example.com", "/new") == "404"
    finally:
        stop.set()
        loop.join(10)
    after = inst.haproxy.show_proc()
    assert (after.reloads, after.current_worker) == (before.reloads, before.current_worker)
    assert served >= 200 and failures == []
    # The map files hold what HAProxy runs: a reload (a method rule is config) keeps it.
    again = listener(rule([P], "c", "/new"), rule([P], "b", "/post", method="POST"))
    result = inst.applier.apply(site.snapshot([again], 10))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    wait_until(lambda: inst.haproxy.show_proc().reloads > before.reloads, 5)
    assert site.served_by(P, "/new") == "c" and site.served_by(P, "/stable") == "a"
    assert site.served_by(P, "/post", method="POST") == "b"


def test_a_refused_map_command_falls_back_to_a_reload(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """HAProxy no longer holds an entry the agent deletes ("Key not found"): the change is
    applied by a reload that reads the map files, and the reason says why."""
    port = site.ports[0]
    inst = site.inst
    two = pb.HttpListener(port=port, rules=[rule([P], "a", "/x"), rule([P], "b", "/y")])
    assert inst.applier.apply(site.snapshot([two], 1)).ok
    prefix = f"{inst.applier.options.maps_dir}/fe_{port}.prefix.map"
    assert inst.haproxy.runtime(f"del map {prefix} {P}/y/").strip() == ""
    one = pb.HttpListener(port=port, rules=[rule([P], "c", "/x")])
    with caplog.at_level("INFO", logger="nodeagent.apply.applier"):
        result = inst.applier.apply(site.snapshot([one], 2))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    assert "runtime update failed, reloading: map update refused" in caplog.text
    assert site.served_by(P, "/x") == "c" and site.served_by(P, "/y") == "404"
    with open(prefix) as f:
        assert f.read() == f"{P}/x/ 2:ns_c_80\n"


def test_an_ingress_wildcard_takes_one_label_a_gateway_wildcard_any(site: Site) -> None:
    """`*.foo.com` of an Ingress rule answers bar.foo.com, not baz.bar.foo.com (it falls
    through to a Gateway API `*.foo.com` or the default backend); through runtime map
    commands and through a reload alike."""
    port = site.ports[0]

    def ingress(to: str, path: str, single: bool = True) -> pb.RouteRule:
        return rule(["*.foo.com"], to, path, source="Ingress ns/i", single_label_wildcards=single)

    def listener(*extra: pb.RouteRule) -> pb.HttpListener:
        return pb.HttpListener(
            port=port, rules=[rule([P], "a", "/stable"), *extra], default_backend="ns_c_80"
        )

    inst = site.inst
    assert inst.applier.apply(site.snapshot([listener()], 1)).ok
    steps = [  # (rules, kind of change, {(host, path): served by})
        (
            [rule(["*.foo.com"], "b", "/gw"), ingress("a", "/")],
            ApplyPath.RUNTIME,
            {
                ("bar.foo.com", "/x"): "a",
                ("baz.bar.foo.com", "/x"): "c",
                ("baz.bar.foo.com", "/gw"): "b",
                ("bar.foo.com", "/gw"): "b",
            },
        ),
        (  # the same host as a Gateway API route's: any number of labels
            [ingress("a", "/", single=False)],
            ApplyPath.RUNTIME,
            {("bar.foo.com", "/x"): "a", ("baz.bar.foo.com", "/x"): "a"},
        ),
        (  # back to one label
            [ingress("b", "/")],
            ApplyPath.RUNTIME,
            {("bar.foo.com", "/x"): "b", ("a.baz.bar.foo.com", "/x"): "c"},
        ),
        (  # a config rule (an unresolved backend: 500) takes one label as well
            [
                rule(
                    ["*.foo.com"],
                    [("", 1)],
                    "/broken",
                    source="Ingress ns/i",
                    single_label_wildcards=True,
                ),
                ingress("b", "/"),
            ],
            ApplyPath.RELOAD,
            {
                ("bar.foo.com", "/broken"): "500",
                ("baz.bar.foo.com", "/broken"): "c",
                ("bar.foo.com", "/x"): "b",
                ("baz.bar.foo.com", "/x"): "c",
            },
        ),
    ]
    for version, (extra, kind, want) in enumerate(steps, start=2):
        result = inst.applier.apply(site.snapshot([listener(*extra)], version))
        assert result.ok and result.kind is kind, result
        got = {(h, p): site.served_by(h, p) for h, p in want}
        assert got == want, version


def test_runtime_commands_go_first_and_the_files_follow_them_for_a_reload(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A map rule added: HAProxy is told first, in one round trip (no probe of the socket
    before: the commands' connection is it), and before any file is joined or written
    (the map file, patched from the commands' entries, and the saved snapshot's journal
    record follow before the ACK; the config is written after it, from its sections (never
    joined into one copy), by the writer thread, held here and run by the test);
    over adds
    between existing entries, a re-point and a removal the map files stay byte for byte
    what a render from scratch writes, so a reload (a config rule added) serves the same."""
    port, inst = site.ports[0], site.inst
    config = inst.applier.files.config
    monkeypatch.setattr(config, "_run", lambda: None)  # its writes: `config.flush()` below

    def listener(routes: dict[str, str], *extra: pb.RouteRule) -> pb.HttpListener:
        rules = [rule([host], to, "/") for host, to in sorted(routes.items())]
        return pb.HttpListener(port=port, rules=[*extra, *rules])  # longer paths first

    routes = {f"h{n}.example.com": "a" for n in (2, 4, 6, 8)}
    assert inst.applier.apply(site.snapshot([listener(routes)], 1)).ok
    events: list[str] = []
    send = inst.haproxy.set_maps

    def told(updates: Iterable[MapUpdate]) -> None:
        events.append("commands")
        send(updates)

    monkeypatch.setattr(inst.haproxy, "set_maps", told)
    probe = sockrepair.answers

    def probed(path: str, timeout: float = 1.0) -> bool:
        events.append("probe")  # a round trip of its own before the commands
        return probe(path, timeout)

    monkeypatch.setattr(sockrepair, "answers", probed)
    join = Rendered.data

    def joined(rendered: Rendered) -> bytes:
        events.append("config joined")  # 27 MB at 8,000 Services: never, since written in pieces
        return join(rendered)

    monkeypatch.setattr(Rendered, "data", joined)
    write = saved.atomic_write

    def recorded(path: str, data: bytes, mode: int = 0o644) -> None:
        events.append(os.path.basename(path))
        write(path, data, mode)

    monkeypatch.setattr(saved, "atomic_write", recorded)
    append = saved.StateStore._append

    def appended(store: saved.StateStore, record: bytes) -> None:
        events.append("journal record")
        append(store, record)

    monkeypatch.setattr(saved.StateStore, "_append", appended)
    steps = [
        {**routes, "h5.example.com": "b"},  # between h4 and h6
        {**routes, "h1.example.com": "c", "h4.example.com": "b", "h9.example.com": "a"},
        {h: to for h, to in routes.items() if h != "h6.example.com"},  # removed
    ]
    for version, now in enumerate(steps, start=2):
        events.clear()
        snap = site.snapshot([listener(now)], version)
        result = inst.applier.apply(snap)
        assert result.ok and result.kind is ApplyPath.RUNTIME, result
        assert events == ["commands", f"fe_{port}.prefix.map", "journal record"]  # the ACK
        config.flush()  # the writer thread's work, after the ACK
        assert events[3:] == ["haproxy.cfg"]  # written from its sections, never joined
        scratch = render_held(Held.from_snapshot(snap), inst.applier.options)
        for path, entries in scratch.maps.items():
            with open(path, "rb") as f:
                assert f.read() == map_file(entries), (version, path)
        for host, to in now.items():
            assert site.served_by(host, "/") == to
    reloads = inst.haproxy.show_proc().reloads
    post = rule(["h2.example.com"], "c", "/post", method="POST")
    result = inst.applier.apply(site.snapshot([listener(steps[-1], post)], 10))
    assert result.ok and result.kind is ApplyPath.RELOAD, result
    wait_until(lambda: inst.haproxy.show_proc().reloads > reloads, 5)
    for host, to in steps[-1].items():
        assert site.served_by(host, "/") == to
    assert site.served_by("h6.example.com", "/") == "404"
    assert site.served_by("h2.example.com", "/post", method="POST") == "c"


def test_a_silent_runtime_socket_on_a_route_change_is_repaired_in_bounded_time(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    """A map rule change sends its commands without asking the socket first (one round
    trip less per route change): their first connection is the probe. A socket that
    accepts and never answers is given up after `sockrepair.ANSWER_TIMEOUT_S`, nothing
    applied, and the reload binds HAProxy's socket again without asking the socket a
    second time (which would wait as long again); then route changes take the runtime API."""
    port, inst = site.ports[0], site.inst
    runtime = inst.haproxy.runtime_socket

    def listener(*paths: str) -> pb.HttpListener:
        return pb.HttpListener(port=port, rules=[rule([P], to, path) for path, to in paths])

    assert inst.applier.apply(site.snapshot([listener(("/x", "a"))], 1)).ok
    with silent_socket(runtime) as accepted, caplog.at_level(logging.INFO, logger="nodeagent"):
        start = time.monotonic()
        repaired = inst.applier.apply(site.snapshot([listener(("/x", "a"), ("/y", "b"))], 2))
        took = time.monotonic() - start
        assert repaired.ok and repaired.kind is ApplyPath.RELOAD, repaired
        assert accepted and took < sockrepair.ANSWER_TIMEOUT_S + 2.0, f"{took:.1f}s"
        assert f"runtime socket {runtime} does not answer" in caplog.text
        assert "Name: HAProxy" in command(runtime, "show info", 2.0)
    assert site.served_by(P, "/y") == "b"
    later = inst.applier.apply(site.snapshot([listener(("/x", "a"), ("/y", "c"))], 3))
    assert later.ok and later.kind is ApplyPath.RUNTIME, later
    assert site.served_by(P, "/y") == "c"
