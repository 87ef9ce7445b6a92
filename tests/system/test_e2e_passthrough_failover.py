"""End to end through a TLS passthrough listener: control plane, two agents, two real
HAProxy peered, backend pods that terminate TLS themselves.

A Gateway TLS listener in Passthrough mode and a TLSRoute reach a Service with source-IP
persistence: its backend is a mode-tcp backend with the Service's own stick table and
peers, so clients pinned through HAProxy A keep their pod when A is lost, as clients of
an HTTPRoute do (test_e2e_failover.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import HAPROXY_PODS, Fleet
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.pinning import lose_a_and_check_b, pin_through_a, tables_agree
from tests.helpers.tls_backends import client_context, tls_hello, tls_servers
from tests.helpers.tls_certs import TestCA, make_ca

pytestmark = pytest.mark.haproxy

OCTET = 64
PORT = 18443
SNI = "secrets.vault.example.com"
PODS = {f"vault-{i}": f"127.0.6.{i + 1}" for i in range(3)}
CLIENTS = [f"127.{OCTET}.9.{i}" for i in range(1, 13)]
TABLE = "default_vault_tls"
ENDPOINTS = "".join(
    f"""
  - addresses: ["{address}"]
    conditions: {{ready: true}}
    targetRef: {{kind: Pod, name: {pod}}}"""
    for pod, address in PODS.items()
)
MANIFEST = f"""\
apiVersion: v1
kind: Service
metadata:
  name: vault
  namespace: default
  creationTimestamp: "2026-01-04T00:00:00Z"
  annotations:
    haproxy.org/load-balance: source
    haproxy.org/source-ip-persistence: "true"
spec:
  ports:
    - name: tls
      port: 443
      targetPort: {PORT}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: vault-x1y2z
  namespace: default
  labels:
    kubernetes.io/service-name: vault
addressType: IPv4
ports:
  - name: tls
    port: {PORT}
    protocol: TCP
endpoints:{ENDPOINTS}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: tls
  namespace: default
  creationTimestamp: "2026-01-04T00:00:00Z"
spec:
  gatewayClassName: peerplane
  listeners:
    - name: tls
      port: {PORT}
      protocol: TLS
      hostname: "*.vault.example.com"
      tls: {{mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TLSRoute
metadata:
  name: vault
  namespace: default
  creationTimestamp: "2026-01-04T00:00:00Z"
spec:
  parentRefs:
    - name: tls
  hostnames: ["{SNI}"]
  rules:
    - backendRefs:
        - {{name: vault, port: 443}}
"""


@pytest.fixture
def fleet(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[tuple[Fleet, TestCA]]:
    ca = make_ca()
    leaf = ca.issue(SNI)
    running = Fleet(tmp_path, OCTET, haproxy_bin=haproxy_bin.path)
    running.manifests.mkdir(parents=True)
    (running.manifests / "vault.yaml").write_text(MANIFEST)  # moved to 127.<OCTET> as the rest
    servers = {pod: (running.ip(address), leaf) for pod, address in PODS.items()}
    with tls_servers(servers, port=PORT):
        try:
            running.start()
            yield running, ca
        finally:
            running.stop()


def test_clients_pinned_through_a_passthrough_listener_keep_their_pod_after_failover(
    fleet: tuple[Fleet, TestCA],
) -> None:
    running, ca = fleet
    a = running.agents[HAPROXY_PODS[0][0]]
    ctx = client_context(ca)

    def pod_via(haproxy: str, client: str) -> str:
        got = tls_hello(ctx, (haproxy, PORT), SNI, source=client)
        assert got is not None, f"{client}: connection closed"
        assert got[0] == SNI  # the pod's own certificate: TLS was not terminated
        return got[1]

    pinned = pin_through_a(running, CLIENTS, pod_via)
    assert set(pinned.values()) <= set(PODS)
    assert tls_hello(ctx, (a.address, PORT), "other.vault.example.com", source=CLIENTS[0]) is None
    tables_agree(running, TABLE, CLIENTS)
    lose_a_and_check_b(running, pinned, pod_via)  # the agent stops its HAProxy: A is gone
