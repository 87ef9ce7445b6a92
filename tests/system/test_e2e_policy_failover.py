"""End to end on real HAProxy: the demo's shop configured by a SourceIPPersistencePolicy
instead of its annotation: once the annotation goes, the policy's stick table serves
(while it is there the annotation wins: tests/compute/test_persistence_policy.py), and
clients pinned through HAProxy A keep their pod through B when A is lost, as with the
annotation (tests/system/test_e2e_failover.py; the steps: tests/helpers/pinning.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet, http_get, running_fleet
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.pinning import failover_keeps_pins

pytestmark = pytest.mark.haproxy

OCTET = 97  # 127.97.x.y: apart from the other tests
HOST = "shop.example.com"
CLIENTS = [f"127.{OCTET}.9.{i}" for i in range(1, 13)]
ANNOTATION = '    haproxy.org/source-ip-persistence: "true"\n'
POLICY = """\
apiVersion: peerplane.dev/v1alpha1
kind: SourceIPPersistencePolicy
metadata:
  name: sticky-shop
  namespace: default
spec:
  targetRefs:
    - {group: "", kind: Service, name: shop}
  tableSize: 64k
  expire: 10m
"""


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Fleet]:
    with running_fleet(tmp_path, OCTET, haproxy_bin.path) as running:
        yield running


def shop_backend(fleet: Fleet) -> str:
    text = fleet.agents[HAPROXY_PODS[0][0]].config.read_text()
    return text.split("backend default_shop_http\n", 1)[1].split("\nbackend ", 1)[0]


def test_clients_pinned_by_a_policy_keep_their_pod_after_failover(fleet: Fleet) -> None:
    before = fleet.snapshot().content_hash
    assert "stick-table type ip size 1m expire 1800000" in shop_backend(fleet)
    policy = fleet.manifests / "policy.yaml"
    tmp = policy.with_suffix(".tmp")
    tmp.write_text(POLICY)
    os.replace(tmp, policy)
    fleet.edit_manifest("shop.yaml", lambda text: text.replace(ANNOTATION, ""))
    assert fleet.snapshot().content_hash != before
    backend = shop_backend(fleet)
    assert "stick on src" in backend
    assert "stick-table type ip size 64k expire 600000 " in backend

    def via(haproxy: str, client: str) -> str:
        return http_get(haproxy, HOST, client)

    failover_keeps_pins(fleet, CLIENTS, "default_shop_http", via)
