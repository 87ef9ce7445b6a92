"""End to end: session persistence (GEP-1619) across the loss of an HAProxy instance.

The demo's HTTPRoute `sessions` gives catalog cookie persistence. A cookie's value is the
slot's server name, the same pod on every instance, so a client that got its cookie from
instance A keeps its pod through B once A is gone, with nothing replicated. Header
persistence keys a stick table by the header's value, replicated through the peers like
the source-IP tables. The upstream conformance assertions are checked on the way: the
route is Accepted, a Session cookie carries no Expires or Max-Age, a Permanent one its
lifetime, requests with the cookie reach one pod.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet, running_fleet, table_entries
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

OCTET = 91  # 127.91.x.y: apart from the other tests and benchmarks
HOST = "sessions.demo.example.com"  # deploy/examples/demo/sessions.yaml
COOKIE = "catalog-session"
CLIENTS = 12
SESSION_BLOCK = (
    "      sessionPersistence:\n        sessionName: catalog-session\n        type: Cookie\n"
)


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    with running_fleet(tmp_path, OCTET, haproxy_bin.path) as running:
        yield running


def get(haproxy: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """GET / of the sessions host through `haproxy`: the pod that answered and the
    Set-Cookie header ("" when none)."""
    conn = http.client.HTTPConnection(haproxy, 18080, timeout=5)
    try:
        conn.request("GET", "/", headers={"Host": HOST, "Connection": "close", **(headers or {})})
        reply = conn.getresponse()
        body = reply.read().decode().strip()
        assert reply.status == 200, f"HTTP {reply.status}: {body[:200]}"
        # the route rewrites the Host and adds this header: persistence holds through it
        assert reply.getheader("x-session-route") == "sessions"
        return body, reply.getheader("Set-Cookie") or ""
    finally:
        conn.close()


def cookie_value(set_cookie: str) -> str:
    name, _, rest = set_cookie.partition("=")
    assert name == COOKIE, set_cookie
    return rest.split(";", 1)[0]


def attributes(set_cookie: str) -> set[str]:
    return {part.split("=", 1)[0].strip().lower() for part in set_cookie.split(";")[1:]}


def with_cookie(haproxy: str, value: str) -> tuple[str, str]:
    return get(haproxy, {"Cookie": f"{COOKIE}={value}"})


def test_session_cookie_keeps_its_pod_when_the_instance_that_set_it_is_lost(
    fleet: Fleet, haproxy_bin: HAProxyBinary
) -> None:
    (name_a, _), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    assert f"cookie {COOKIE} insert indirect nocache" in a.config.read_text()
    cookies: list[tuple[str, str]] = []  # each client's cookie value and pod
    for _ in range(CLIENTS):
        pod, set_cookie = get(a.address)
        assert set_cookie, "a request without a cookie gets one"
        assert not attributes(set_cookie) & {"expires", "max-age"}, set_cookie
        cookies.append((cookie_value(set_cookie), pod))
    assert cookies[0][0].startswith("SRV_"), cookies[0]
    assert len({pod for _, pod in cookies}) == 2, "clients should spread over both catalog pods"
    for value, pod in cookies:
        for _ in range(3):
            assert with_cookie(a.address, value)[0] == pod

    fleet.stop_agent(name_a)  # the agent stops its HAProxy: instance A is gone
    with pytest.raises(OSError):
        get(a.address)
    moved = [(v, p) for v, p in cookies if with_cookie(b.address, v)[0] != p]
    print(f"HAProxy {haproxy_bin.version}: cookie: {len(moved)} of {len(cookies)} moved")
    assert moved == [], "clients moved after failover"

    # A cookie naming a pod that is gone: another pod answers and sets a new cookie.
    gone = next(v for v, p in cookies if p == "catalog-0")
    fleet.edit_manifest(
        "catalog.yaml",
        lambda text: text.replace(
            f'  - addresses: ["{fleet.ip("127.0.3.1")}"]\n'
            "    conditions: {ready: true}\n"
            "    targetRef: {kind: Pod, name: catalog-0}\n",
            "",
        ),
    )
    fleet.backends.stop("catalog-0")
    pod, set_cookie = with_cookie(b.address, gone)
    assert pod == "catalog-1"
    assert set_cookie and cookie_value(set_cookie) != gone
    assert with_cookie(b.address, cookie_value(set_cookie))[0] == "catalog-1"


def test_header_persistence_keeps_its_pod_through_the_replicated_table(
    fleet: Fleet, haproxy_bin: HAProxyBinary
) -> None:
    (name_a, _), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    fleet.edit_manifest(
        "sessions.yaml",
        lambda text: text.replace(
            SESSION_BLOCK,
            "      sessionPersistence:\n        sessionName: X-Session\n        type: Header\n",
        ),
    )
    assert "stick on req.hdr(X-Session)" in a.config.read_text()
    sessions = [f"user-{i}" for i in range(CLIENTS)]
    pinned = {s: get(a.address, {"X-Session": s})[0] for s in sessions}
    assert len(set(pinned.values())) == 2, "sessions should spread over both catalog pods"
    for session, pod in pinned.items():
        assert get(a.address, {"X-Session": session})[0] == pod

    def table(agent: str) -> dict[str, str]:
        return table_entries(fleet.agents[agent].runtime("show table default_catalog_http"))

    wait_until(lambda: set(table(name_b)) == set(sessions), 10, "B to learn the sessions")
    fleet.stop_agent(name_a)
    moved = {s: p for s, p in pinned.items() if get(b.address, {"X-Session": s})[0] != p}
    print(f"HAProxy {haproxy_bin.version}: header: {len(moved)} of {len(pinned)} moved")
    assert moved == {}, "sessions moved after failover"


def test_permanent_cookie_carries_its_lifetime(fleet: Fleet) -> None:
    (name_a, _), _ = HAPROXY_PODS
    a = fleet.agents[name_a]
    fleet.edit_manifest(
        "sessions.yaml",
        lambda text: text.replace(
            SESSION_BLOCK,
            SESSION_BLOCK + "        absoluteTimeout: 1h\n"
            "        cookieConfig: {lifetimeType: Permanent}\n",
        ),
    )
    pod, set_cookie = get(a.address)
    assert "max-age=3600" in set_cookie.lower().replace(" ", ""), set_cookie
    for _ in range(3):
        assert with_cookie(a.address, cookie_value(set_cookie))[0] == pod
    snapshot = fleet.snapshot()
    assert not [w for w in snapshot.warnings if "sessions" in w.object], "nothing refused"
