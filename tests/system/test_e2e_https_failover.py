"""End to end over HTTPS: control plane, two agents, two real HAProxy peered, the demo's
HTTPS part (deploy/examples/demo-https/: a Gateway listener with tls.mode Terminate and an
Ingress with spec.tls, both to shop) with its kubernetes.io/tls Secret in the folder.

Clients verify the served certificate against the test CA (SNI, names) and get the
Secret's serial; clients pinned through HAProxy A keep their shop pod through B when A is
lost, as over HTTP (test_e2e_failover.py) and through a passthrough listener
(test_e2e_passthrough_failover.py). A renewed Secret (new serial, same names) is served by
both instances without a reload while requests go on, none failing. Another tenant's
Secret with a key HAProxy refuses is refused alone by the control plane, and the
workload's later changes keep applying.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.helpers.fleet import BACKENDS, HAPROXY_PODS, Fleet
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.https_fleet import (
    GATEWAY_HOST,
    INGRESS_HOST,
    SHOP_TABLE,
    RequestLoop,
    https_get,
    issue,
    keepalive,
    reloads,
    verifying_context,
    wait_served,
    write_https,
    write_secret,
)
from tests.helpers.pinning import failover_keeps_pins
from tests.helpers.tls_certs import Leaf, TestCA, make_ca, rsa_key, tls_secret
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy

OCTET = 66
CLIENTS = [f"127.{OCTET}.9.{i}" for i in range(1, 13)]
SHOP_PODS = {name for name, *_ in BACKENDS if name.startswith("shop-")}


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[tuple[Fleet, TestCA, Leaf]]:
    ca = make_ca()
    leaf = issue(ca)
    running = Fleet(tmp_path, OCTET, haproxy_bin=haproxy_bin.path)
    write_https(running.manifests, leaf)
    try:
        running.start()
        yield running, ca, leaf
    finally:
        running.stop()


def test_https_clients_pinned_through_a_keep_their_pod_after_failover(
    fleet: tuple[Fleet, TestCA, Leaf],
) -> None:
    running, ca, leaf = fleet
    ctx = verifying_context(ca)
    snapshot = running.snapshot()
    assert [c.serial for c in snapshot.certificates] == [leaf.serial_hex]
    assert not snapshot.certificates[0].pem  # inspection never shows the key

    def pod_via(haproxy: str, client: str) -> str:
        answer = https_get(ctx, haproxy, GATEWAY_HOST, client)
        assert answer.serial == leaf.serial_hex  # the Secret's certificate, verified
        return answer.body

    # The Ingress's spec.tls host: the same certificate on the same port, shop answers.
    for agent in running.agents.values():
        answer = https_get(ctx, agent.address, INGRESS_HOST, CLIENTS[0])
        assert answer.body in SHOP_PODS and answer.serial == leaf.serial_hex
    failover_keeps_pins(running, CLIENTS, SHOP_TABLE, pod_via)


def test_a_renewed_secret_is_served_by_both_instances_without_a_reload_or_a_failed_request(
    fleet: tuple[Fleet, TestCA, Leaf],
) -> None:
    running, ca, leaf = fleet
    ctx = verifying_context(ca)
    agents = [running.agents[name] for name, _ in HAPROXY_PODS]
    haproxies = [a.address for a in agents]
    renewed = issue(ca)
    assert renewed.serial_hex != leaf.serial_hex
    before = reloads(agents)
    opened = keepalive(ctx, haproxies[0], GATEWAY_HOST)  # connected before the renewal
    with RequestLoop(ctx, haproxies, GATEWAY_HOST) as loop:
        loop.wait_sent(20)  # requests before the rotation
        changed = write_secret(running.manifests, renewed)
        wait_served(ctx, haproxies, GATEWAY_HOST, renewed.serial_hex, changed, timeout=30)
        wait_served(ctx, haproxies, INGRESS_HOST, renewed.serial_hex, changed, timeout=30)
        running.wait_all_acked()
        loop.wait_sent(loop.sent + 20)  # and after it
    try:  # the connection opened before keeps going, on the certificate it was made with
        for _ in range(2):
            assert opened.get().body in SHOP_PODS
        assert opened.serial == leaf.serial_hex
    finally:
        opened.close()
    assert loop.failures == []
    assert loop.serials == {leaf.serial_hex, renewed.serial_hex}
    assert reloads(agents) - before == 0


WEAK_INGRESS = """\
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: tenant-b
  namespace: default
  creationTimestamp: "2026-01-03T00:00:00Z"
spec:
  ingressClassName: peerplane
  tls:
    - hosts: ["b.example.com"]
      secretName: tenant-b-tls
  rules:
    - host: b.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service: {name: shop, port: {number: 80}}
"""


def test_a_tenants_weak_secret_is_refused_alone_and_the_others_changes_keep_flowing(
    fleet: tuple[Fleet, TestCA, Leaf],
) -> None:
    """T1 end to end: another tenant's Ingress with an RSA-1024 Secret (which HAProxy
    refuses, "ee key too small") used to reach the agents and be NACKed, that version and
    every later one, so an endpoint removal stayed unapplied. The control plane now
    refuses that Secret alone (a warning, an Event), every agent ACKs, the demo's
    certificate keeps serving and the endpoint removal that follows applies."""
    running, ca, leaf = fleet
    ctx = verifying_context(ca)
    before = running.snapshot().content_hash
    weak = ca.issue("b.example.com", key=rsa_key(1024))
    secret = running.manifests / "tenant-b-tls.yaml"
    secret.write_text(yaml.safe_dump(tls_secret("tenant-b-tls", weak)))
    ingress = running.manifests / "tenant-b.yaml"
    tmp = ingress.with_suffix(".tmp")
    tmp.write_text(WEAK_INGRESS)
    os.replace(tmp, ingress)
    wait_until(lambda: running.snapshot().content_hash != before, 30, "a new version")
    running.wait_all_acked()
    snapshot = running.snapshot()
    assert [c.name for c in snapshot.certificates] == ["default_demo-tls"]
    (warning,) = [w for w in snapshot.warnings if w.object == "Ingress default/tenant-b"]
    assert "RSA key of 1024 bits" in warning.reason
    assert all(not a.last_nack_error and not a.set_aside for a in running.agents_status())
    running.edit_manifest(  # waits for every agent's ACK of the removal
        "shop.yaml",
        lambda text: text.replace(
            f'  - addresses: ["{running.ip("127.0.2.1")}"]\n'
            "    conditions: {ready: true}\n"
            "    targetRef: {kind: Pod, name: shop-0}\n",
            "",
        ),
    )
    shop = next(b for b in running.snapshot().backends if b.name == SHOP_TABLE)
    assert running.ip("127.0.2.1") not in {s.address for s in shop.slots if s.enabled}
    for agent in running.agents.values():
        assert https_get(ctx, agent.address, GATEWAY_HOST, CLIENTS[0]).serial == leaf.serial_hex
