"""End to end: control plane, two agents, two real HAProxy peered, real backends.

Clients pinned through HAProxy A keep their backend pod when A is lost, whether they
reach the Service by its `haproxy.org/hosts` route or through an HTTPRoute (the same
backend, one stick table); scaling the backend through the manifests folder never moves a
surviving client.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet, http_get, running_fleet, table_entries, tcp_get
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

OCTET = 31
HOST = "shop.example.com"
CLIENTS = [f"127.{OCTET}.9.{i}" for i in range(1, 13)]


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    with running_fleet(tmp_path, OCTET, haproxy_bin.path) as running:
        yield running


def pin_clients(fleet: Fleet, via: str) -> dict[str, str]:
    """Each client's backend pod through HAProxy `via`, checked to be stable."""
    pinned = {client: http_get(via, HOST, client) for client in CLIENTS}
    for client, pod in pinned.items():
        assert http_get(via, HOST, client) == pod
    return pinned


def shop_table(fleet: Fleet, pod: str) -> dict[str, str]:
    return table_entries(fleet.agents[pod].runtime("show table default_shop_http"))


def test_failover_keeps_every_client_on_its_backend_pod(fleet: Fleet) -> None:
    (name_a, _), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    assert f"localpeer {name_a}" in a.config.read_text()
    assert "peers localinstance" in b.config.read_text()

    pinned = pin_clients(fleet, a.address)
    assert len(set(pinned.values())) > 1, "clients should spread over several pods"

    # B learned every entry from A through the peers section, with the same server names.
    table_a = shop_table(fleet, name_a)
    assert set(table_a) == set(CLIENTS)
    wait_until(lambda: shop_table(fleet, name_b) == table_a, 10, "B's stick table to match A's")

    fleet.stop_agent(name_a)  # the agent stops its HAProxy: instance A is gone
    with pytest.raises(OSError):
        http_get(a.address, HOST, CLIENTS[0], timeout=1)
    for client, pod in pinned.items():
        assert http_get(b.address, HOST, client) == pod, f"{client} moved after failover"

    # The TCP service answers through B as well.
    assert tcp_get(b.address, CLIENTS[0]).startswith("db-")


ROUTED_HOST = "store.demo.example.com"  # deploy/examples/demo/routes.yaml: /cart -> shop


def exchange(
    haproxy: str, host: str, path: str, source: str, timeout: float = 5
) -> tuple[int, http.client.HTTPMessage, str]:
    """GET `path` through `haproxy` from `source` on a fresh connection: the status, the
    headers and the body."""
    conn = http.client.HTTPConnection(haproxy, 18080, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Host": host, "Connection": "close"})
        reply = conn.getresponse()
        return reply.status, reply.headers, reply.read().decode().strip()
    finally:
        conn.close()


def get_path(haproxy: str, host: str, path: str, source: str, timeout: float = 5) -> str:
    """GET `path` through `haproxy` from `source` on a fresh connection; the body (200)."""
    status, _, body = exchange(haproxy, host, path, source, timeout)
    assert status == 200, f"HTTP {status} for {host}{path}: {body[:200]}"
    return body


CART_RULE = """    - matches:
        - path: {type: PathPrefix, value: /cart}
      backendRefs:
        - {name: shop, port: 80}
"""
# The same rule with a path rewrite and a response header: persistence is the backend's,
# whatever the rule does to the request (issue 32, "failover with the new features").
REWRITING_CART_RULE = """    - matches:
        - path: {type: PathPrefix, value: /cart}
      filters:
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /basket}}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {add: [{name: x-rewritten, value: basket}]}
      backendRefs:
        - {name: shop, port: 80}
"""


def rewritten(haproxy: str, source: str) -> str | None:
    """The response header the rewriting rule adds, for /cart through `haproxy`."""
    _, headers, _ = exchange(haproxy, ROUTED_HOST, "/cart", source)
    return headers.get("x-rewritten")


def test_clients_pinned_through_an_httproute_keep_their_pod_after_failover(fleet: Fleet) -> None:
    """The HTTPRoute's backend is the Service's backend: its source-IP persistence and
    peers replication hold for clients routed by the Gateway API as for the annotation,
    through a rule that rewrites the path and adds a response header."""
    (name_a, _), (name_b, _) = HAPROXY_PODS
    a, b = fleet.agents[name_a], fleet.agents[name_b]
    fleet.edit_manifest("routes.yaml", lambda text: text.replace(CART_RULE, REWRITING_CART_RULE))
    assert rewritten(a.address, CLIENTS[0]) == rewritten(b.address, CLIENTS[0]) == "basket"
    pinned = {c: get_path(a.address, ROUTED_HOST, "/cart", c) for c in CLIENTS}
    assert all(pod.startswith("shop-") for pod in pinned.values())
    assert len(set(pinned.values())) > 1, "clients should spread over several pods"
    for client, pod in pinned.items():
        assert get_path(a.address, ROUTED_HOST, "/cart/items", client) == pod
    wait_until(lambda: set(shop_table(fleet, name_b)) == set(CLIENTS), 10, "B to learn them")

    fleet.stop_agent(name_a)
    with pytest.raises(OSError):
        get_path(a.address, ROUTED_HOST, "/cart", CLIENTS[0], timeout=1)
    moved = {c: p for c, p in pinned.items() if get_path(b.address, ROUTED_HOST, "/cart", c) != p}
    assert moved == {}, "clients moved after failover"
    # The annotation route reaches the same backend and the same pins.
    assert {c: http_get(b.address, HOST, c) for c in CLIENTS} == pinned


def test_scaling_the_backend_never_moves_a_surviving_client(fleet: Fleet) -> None:
    (name_a, _), (name_b, _) = HAPROXY_PODS
    b = fleet.agents[name_b]
    pinned = pin_clients(fleet, b.address)
    # A fresh pair of instances replicates only once their peer sessions are up (HAProxy's
    # startup resync takes a few seconds): A must hold B's entries before it is asked.
    table_b = shop_table(fleet, name_b)
    wait_until(lambda: shop_table(fleet, name_a) == table_b, 15, "A's stick table to match B's")
    pid_before = b.runtime("show info")

    # Scale up: a fourth shop pod appears; it takes a free slot, by runtime API.
    fleet.backends.start("shop-3", fleet.ip("127.0.2.4"), 8888)
    fleet.edit_manifest(
        "shop.yaml",
        lambda text: text.replace(
            "    targetRef: {kind: Pod, name: shop-2}",
            "    targetRef: {kind: Pod, name: shop-2}\n"
            f'  - addresses: ["{fleet.ip("127.0.2.4")}"]\n'
            "    conditions: {ready: true}\n"
            "    targetRef: {kind: Pod, name: shop-3}",
        ),
    )
    slots = {s.address: s.server_name for s in fleet.snapshot().backends[2].slots if s.enabled}
    assert slots[fleet.ip("127.0.2.4")] == "SRV_4"
    assert worker_pid(pid_before) == worker_pid(b.runtime("show info")), "scale-up reloaded"
    for client, pod in pinned.items():
        assert http_get(b.address, HOST, client) == pod, f"{client} moved on scale-up"

    # Scale down: shop-0 goes away; only its clients may move.
    fleet.edit_manifest(
        "shop.yaml",
        lambda text: text.replace(
            f'  - addresses: ["{fleet.ip("127.0.2.1")}"]\n'
            "    conditions: {ready: true}\n"
            "    targetRef: {kind: Pod, name: shop-0}\n",
            "",
        ),
    )
    fleet.backends.stop("shop-0")
    for via in (fleet.agents[name_a].address, b.address):
        for client, pod in pinned.items():
            now = http_get(via, HOST, client)
            if pod != "shop-0":
                assert now == pod, f"{client} moved from surviving {pod} to {now}"
            else:
                assert now != "shop-0"


def worker_pid(show_info: str) -> str:
    for line in show_info.splitlines():
        if line.startswith("Pid:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no Pid in show info: {show_info[:200]}")


def test_agent_restarted_without_control_plane_serves_the_saved_snapshot(fleet: Fleet) -> None:
    (name_a, address_a), _ = HAPROXY_PODS
    a = fleet.agents[name_a]
    before = http_get(a.address, HOST, CLIENTS[0])
    fleet.stop_control_plane()
    fleet.stop_agent(name_a)
    restarted = fleet.start_agent(name_a, address_a)
    wait_until(
        lambda: restarted.runtime_socket.exists(), 15, "HAProxy to start from the saved state"
    )
    wait_until(lambda: _answers(restarted.address, CLIENTS[0]), 15, "HAProxy to serve")
    assert http_get(restarted.address, HOST, CLIENTS[0]) == before


def _answers(address: str, client: str) -> bool:
    try:
        http_get(address, HOST, client, timeout=1)
    except (OSError, RuntimeError):
        return False
    return True
