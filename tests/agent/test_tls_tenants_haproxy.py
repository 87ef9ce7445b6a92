"""Two tenants on one HTTPS port of a real HAProxy (each installed version): the crt-list
the control plane computes, applied through the agent, serves the victim's certificate for
its names after another tenant's Ingress names one of them, and the port's default
certificate is the operator's choice or none (hostile round three, R2 and R3;
tests/routes/test_sni_ownership.py holds the rules)."""

from __future__ import annotations

import dataclasses
import random
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from controlplane.compute import compute
from controlplane.model import ClusterState, ConfigMap, TLSSecret
from controlplane.publish.encode import encode_one
from controlplane.source.convert_gateway import gateway_from
from controlplane.source.convert_ingress import ingress_from
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import WORKLOAD
from tests.helpers.haproxy_env import (
    Instance,
    backend,
    free_port,
    identity_server,
    running_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.route_builders import state
from tests.helpers.tls_agent import served_serial
from tests.helpers.tls_certs import Leaf, make_ca

pytestmark = pytest.mark.haproxy

NOW = time.time()
CA = make_ca()
VICTIM = CA.issue("*.demo.example.com")
EVIL = CA.issue("secure.demo.example.com", "shop.tenant-b.example.org")
AAA = CA.issue("aaa.example.com")
OPERATOR = CA.issue("edge.example.net")
SECURE = "secure.demo.example.com"


def _secret(namespace: str, name: str, leaf: Leaf) -> TLSSecret:
    return TLSSecret(namespace=namespace, name=name, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)


def _gateway(namespace: str, secret: str, hostname: str, created: str) -> Any:
    listener: dict[str, Any] = {
        "name": "https",
        "port": 443,
        "protocol": "HTTPS",
        "tls": {"mode": "Terminate", "certificateRefs": [{"name": secret}]},
    }
    if hostname:
        listener["hostname"] = hostname
    return gateway_from(
        {
            "metadata": {"name": "web", "namespace": namespace, "creationTimestamp": created},
            "spec": {"gatewayClassName": "peerplane", "listeners": [listener]},
        }
    )


VICTIM_GATEWAY = _gateway("tenant-a", "wild-tls", "*.demo.example.com", "2026-01-01T00:00:00Z")
# Tenant B's Ingress: its rules for its own host, its spec.tls naming the victim's name too.
EVIL_INGRESS = ingress_from(
    {
        "metadata": {
            "name": "evil",
            "namespace": "tenant-b",
            "creationTimestamp": "2026-03-01T00:00:00Z",
        },
        "spec": {
            "rules": [
                {
                    "host": "shop.tenant-b.example.org",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "shop", "port": {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
            "tls": [{"hosts": [SECURE, "shop.tenant-b.example.org"], "secretName": "evil-tls"}],
        },
    }
)
# Tenant aaa sorts first: a listener without hostname (its certificate's own names).
AAA_GATEWAY = _gateway("aaa", "aaa-tls", "", "2025-01-01T00:00:00Z")
SECRETS = (
    _secret("tenant-a", "wild-tls", VICTIM),
    _secret("tenant-b", "evil-tls", EVIL),
    _secret("aaa", "aaa-tls", AAA),
    _secret("haproxy-system", "default-tls", OPERATOR),
)


def _cluster(*objects: Any, default_certificate: str = "") -> ClusterState:
    data = {"default-certificate": default_certificate} if default_certificate else {}
    config = ConfigMap("haproxy-system", "haproxy-settings", data=data)
    return dataclasses.replace(state(*objects, config=config), secrets=SECRETS)


@dataclass
class Edge:
    """One agent-managed HAProxy given the computed HTTPS listener of port 443 (its
    crt-list and certificates) in front of one backend."""

    inst: Instance
    end: tuple[str, int]
    port: int
    peer_port: int
    version: int = 0

    def apply(self, cluster_state: ClusterState) -> None:
        computed = compute(cluster_state, {}, now=NOW).workloads[WORKLOAD]
        message = encode_one(computed).message()
        (https,) = [lst for lst in message.http_listeners if lst.port == 443]
        self.version += 1
        snap = snapshot(
            [("pod-a", self.inst.ip, self.peer_port)],
            [backend("ns_web_80", [self.end], balance="roundrobin", persistence=False)],
            version=self.version,
        )
        snap.certificates.extend(message.certificates)
        listener = pb.HttpListener(port=self.port, default_backend="ns_web_80")
        listener.tls.CopyFrom(https.tls)
        snap.http_listeners.append(listener)
        result = self.inst.applier.apply(snap)
        assert result.ok, result.error

    def serial(self, sni: str | None) -> str:
        """The serial of the certificate served for `sni`; "" when the handshake fails."""
        try:
            return served_serial(self.inst.ip, self.port, sni)
        except (ssl.SSLError, ConnectionError):
            return ""


@pytest.fixture
def edge(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Edge]:
    net = f"127.59.{random.randint(1, 250)}"
    with (
        identity_server(f"{net}.11", "web") as web_port,
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        yield Edge(inst, (f"{net}.11", web_port), free_port(inst.ip), free_port(inst.ip))


def test_another_tenants_ingress_cannot_take_the_victims_name(edge: Edge) -> None:
    """R2 as reported: after tenant B's Ingress appears, a client asking for
    secure.demo.example.com still gets tenant A's certificate; B's own name gets B's."""
    edge.apply(_cluster(VICTIM_GATEWAY))
    assert edge.serial(SECURE) == VICTIM.serial_hex
    edge.apply(_cluster(VICTIM_GATEWAY, EVIL_INGRESS))
    assert edge.serial(SECURE) == VICTIM.serial_hex
    assert edge.serial("x.demo.example.com") == VICTIM.serial_hex
    assert edge.serial("shop.tenant-b.example.org") == EVIL.serial_hex


def test_the_default_certificate_is_the_operators_or_none(edge: Edge) -> None:
    """R3: tenant `aaa` sorts first with a listener without hostname; a client without SNI
    or with a name no line holds gets no certificate (the handshake fails) until the
    settings name one, then the operator's, while every tenant keeps its names."""
    objects = (AAA_GATEWAY, VICTIM_GATEWAY, EVIL_INGRESS)
    edge.apply(_cluster(*objects))
    assert edge.serial(None) == ""
    assert edge.serial("unknown.example.org") == ""
    assert edge.serial("aaa.example.com") == AAA.serial_hex
    assert edge.serial(SECURE) == VICTIM.serial_hex
    edge.apply(_cluster(*objects, default_certificate="haproxy-system/default-tls"))
    assert edge.serial(None) == OPERATOR.serial_hex
    assert edge.serial("unknown.example.org") == OPERATOR.serial_hex
    assert edge.serial("aaa.example.com") == AAA.serial_hex
    assert edge.serial(SECURE) == VICTIM.serial_hex
    assert edge.serial("shop.tenant-b.example.org") == EVIL.serial_hex
