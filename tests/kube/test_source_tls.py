"""KubernetesSource reads the TLS inputs: Secrets of type kubernetes.io/tls only (a field
selector; created, rotated and deleted by watch), TLSRoutes and TCPRoutes at v1alpha2.
A cluster with the Gateway API's standard channel only (no TLSRoute, no TCPRoute CRD)
serves its HTTPRoutes, says so once at INFO and reads the kinds once installed. No log
line, error or repr carries a Secret's key."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from urllib.parse import unquote

import pytest

from controlplane.kube.source import KubernetesSource
from controlplane.model import TLSSecret
from controlplane.source.kinds import GATEWAY_API, L4_ROUTES
from tests.helpers.tls_certs import make_ca, tls_secret
from tests.helpers.waiting import wait_until
from tests.kube.test_source import WATCHED, Changes
from tests.kube.test_source_routes import fast, started
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    gateway,
    gateway_class,
    http_route,
    namespace,
    pod,
    replica_set,
    service,
    tcp_route,
    tls_route,
)

CA = make_ca()
LEAF = CA.issue("shop.example.com")
RENEWED = CA.issue("shop.example.com", "www.example.com")


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI(bookmark_interval=0.2).start()
    for obj in (
        service("shop"),
        pod("haproxy-a", "127.0.0.11"),
        replica_set(),
        namespace("default"),
        gateway_class(),
        gateway(),
        http_route(),
        tls_route(),
        tcp_route(),
        tls_secret("shop-tls", LEAF, "default"),
        tls_secret("notes", LEAF, "default", type_="Opaque"),
    ):
        server.apply(obj)
    yield server
    server.stop()


@pytest.fixture
def source(api: FakeKubeAPI) -> Iterator[KubernetesSource]:
    src = started(api, fast(), Changes())
    wait_until(lambda: api.open_watches() == WATCHED - 1)  # no settings ConfigMap
    yield src
    src.stop()


def secrets(src: KubernetesSource) -> dict[str, TLSSecret]:
    return {s.name: s for s in src.state().secrets}


def key_texts() -> list[str]:
    """Pieces of every key and certificate body the tests use, as text and as base64."""
    found = []
    for pem in (LEAF.key_pem, RENEWED.key_pem, LEAF.cert_pem, RENEWED.cert_pem):
        found.append(b"".join(pem.splitlines()[1:-1])[8:40].decode())
        found.append(base64.b64encode(pem).decode()[40:72])
    return found


def test_initial_sync_reads_tls_secrets_only_and_the_l4_routes(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    state = source.state()
    assert list(secrets(source)) == ["shop-tls"]  # the Opaque one is never read
    (secret,) = state.secrets
    assert (secret.cert_pem, secret.key_pem) == (LEAF.cert_pem, LEAF.key_pem)
    assert [(r.name, r.hostnames) for r in state.tls_routes] == [("db", ("db.example.com",))]
    assert [r.name for r in state.tcp_routes] == ["pg"]
    assert source.errors() == []
    watches = [unquote(p) for m, p in api.requests if m == "WATCH" and "/secrets" in p]
    assert watches and all("fieldSelector=type=kubernetes.io/tls" in p for p in watches)


def test_a_secret_created_rotated_and_deleted_arrives_by_watch(
    api: FakeKubeAPI, source: KubernetesSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    api.apply(tls_secret("web-tls", LEAF, "infra"))
    wait_until(lambda: "web-tls" in secrets(source))
    api.apply(tls_secret("web-tls", RENEWED, "infra"))
    wait_until(lambda: secrets(source)["web-tls"].cert_pem == RENEWED.cert_pem)
    assert secrets(source)["web-tls"].key_pem == RENEWED.key_pem
    api.delete("Secret", "infra", "web-tls")
    wait_until(lambda: "web-tls" not in secrets(source))
    # A tls Secret with data the converter cannot read is kept, empty, for compute to say.
    broken = tls_secret("broken", LEAF, "infra")
    broken["data"]["tls.key"] = "***"
    api.apply(broken)
    wait_until(lambda: "broken" in secrets(source))
    assert secrets(source)["broken"].key_pem == b"" and source.errors() == []
    logged = "\n".join(r.getMessage() for r in caplog.records) + repr(source.state())
    assert all(text not in logged for text in key_texts())


def test_l4_route_changes_arrive_by_watch_and_a_bad_one_blocks_no_other(
    api: FakeKubeAPI, source: KubernetesSource
) -> None:
    api.apply(tls_route(hostnames=("db2.example.com",)))
    wait_until(lambda: [r.hostnames for r in source.state().tls_routes] == [("db2.example.com",)])
    assert source.state().tls_routes[0].generation == 2
    bad = tcp_route("broken")
    bad["spec"]["rules"] = []
    api.apply(bad)
    api.apply(tcp_route("redis", port=6379))
    wait_until(lambda: sorted(r.name for r in source.state().tcp_routes) == ["pg", "redis"])
    assert any(e.startswith("tcproutes default/broken:") for e in source.errors())


def test_a_cluster_without_tls_and_tcp_routes_serves_http_routes_and_says_so_once_at_info(
    api: FakeKubeAPI, caplog: pytest.LogCaptureFixture
) -> None:
    api.remove_kind("TLSRoute")
    api.remove_kind("TCPRoute")
    caplog.set_level(logging.INFO, logger="controlplane.kube.informer")
    src = started(api, fast(absent_recheck=0.1), Changes())
    try:
        state = src.state()
        assert [r.name for r in state.http_routes] == ["shop"]
        assert state.tls_routes == () and state.tcp_routes == ()
        assert list(secrets(src)) == ["shop-tls"]
        assert (
            src.optional_groups[L4_ROUTES].missing and not src.optional_groups[GATEWAY_API].missing
        )
        assert src.errors() == []
        wait_until(lambda: sum(1 for m, p in api.requests if "/tcproutes" in p and m == "GET") >= 3)
        absent = [r for r in caplog.records if "is not served" in r.getMessage()]
        assert [r.levelno for r in absent] == [logging.INFO]
        assert "TLSRoute" in absent[0].getMessage()
        experimental = ("tlsroutes", "tcproutes", "TLSRoute", "v1alpha2", "v1")
        loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert not [m for m in loud if any(word in m for word in experimental)], loud
        # HTTPRoutes keep arriving meanwhile.
        api.apply(http_route("blog", hostnames=("blog.example.com",)))
        wait_until(lambda: len(src.state().http_routes) == 2)
        # The CRDs installed later: read at the next check, no restart.
        api.install_kind("TLSRoute")
        api.install_kind("TCPRoute")
        api.apply(tls_route())
        api.apply(tcp_route())
        wait_until(lambda: [r.name for r in src.state().tls_routes] == ["db"])
        wait_until(lambda: [r.name for r in src.state().tcp_routes] == ["pg"])
        wait_until(lambda: not src.optional_groups[L4_ROUTES].missing)
    finally:
        src.stop()


def test_a_deleted_l4_route_is_told_to_the_status_writer(api: FakeKubeAPI) -> None:
    told: list[tuple[str, str, str]] = []
    src = KubernetesSource(api_client(api.url), settings=None, options=fast(), sync_timeout=5)
    src.on_route_deleted(lambda kind, ns, name: told.append((kind, ns, name)))
    src.start(Changes())
    try:
        api.delete("TLSRoute", "default", "db")
        api.delete("TCPRoute", "default", "pg")
        api.delete("Secret", "default", "shop-tls")  # no status: not told
        wait_until(lambda: len(told) == 2)
        assert sorted(told) == [("TCPRoute", "default", "pg"), ("TLSRoute", "default", "db")]
    finally:
        src.stop()
