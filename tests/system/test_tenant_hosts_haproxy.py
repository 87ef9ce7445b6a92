"""Two tenants on one port of a real HAProxy (each installed version), the routes from the
real computation (the hostile review's R1): tenant B's Gateway, HTTPRoute and Ingress for
the victim's host store.demo.example.com, with rules of higher precedence than the
victim's, answer none of its requests; B keeps the hosts nobody else holds, and the
settings' `gateway-namespaces` keeps B's Gateway from serving at all
(controlplane/routes/ownership.py, docs/annotations.md "Hostname ownership")."""

from __future__ import annotations

import contextlib
import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.compute import compute
from controlplane.publish import encode_one
from controlplane.source.convert_gateway import namespace_from
from nodeagent.config.changes import ApplyPath
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import WORKLOAD, endpoint_slice, haproxy_pod, service, settings
from tests.helpers.haproxy_env import free_port, identity_server, loopback_net, running_instance
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.route_builders import gateway, state
from tests.helpers.tenants import (
    HOST,
    SERVICES,
    tenant_catch_all,
    tenant_gateway,
    tenant_ingress,
    victim,
)

pytestmark = pytest.mark.haproxy

POD = "haproxy-a"
LATER = "2026-03-01T00:00:00Z"


def _objects(kind: str, port: int) -> tuple[Any, ...]:
    """The victim's objects and tenant B's, by how B tries (`annotation`: as `gateway`,
    B's Service also naming the victim's host in `haproxy.org/hosts`)."""
    if kind == "ingress":  # B's Ingress on the settings' http-port, the victim's port
        return (*victim(port), tenant_ingress(catch_all=True))
    gateway_b, steal = tenant_gateway(port=port)
    _, rest = tenant_catch_all(port=port)
    return (*victim(port), gateway_b, steal, rest)


def _snapshot(
    kind: str,
    ip: str,
    ends: dict[str, tuple[str, int]],
    ports: tuple[int, int],
    more: tuple[Any, ...] = (),
    version: int = 1,
) -> pb.Snapshot:
    """The snapshot compute makes of the victim, tenant B as `kind` says, and `more`;
    `ports`: the listeners' (the settings' http-port) and the peers'."""
    port, peer = ports
    data = {"http-port": str(port), "peer-port": str(peer)}
    if kind == "restricted":
        data["gateway-namespaces"] = "kubernetes.io/metadata.name=default"
    namespaces = tuple(
        namespace_from({"metadata": {"name": n, "labels": {"kubernetes.io/metadata.name": n}}})
        for n in ("default", "tenant-b")
    )
    services = SERVICES
    if kind == "annotation":  # B's Service names the victim's host too
        hosts = {"haproxy.org/hosts": HOST}
        services = (SERVICES[0], service("bsvc", namespace="tenant-b", annotations=hosts))
    cluster_state = state(
        *_objects(kind, port),
        *more,
        services=services,
        config=settings(**data),
        pods=(haproxy_pod(POD, ip),),
        namespaces=namespaces,
        endpoint_slices=(
            endpoint_slice("shop", [ends["shop"][0]], port=ends["shop"][1]),
            endpoint_slice("bsvc", [ends["bsvc"][0]], port=ends["bsvc"][1], namespace="tenant-b"),
        ),
    )
    result = compute(cluster_state, {})
    message = encode_one(result.workloads[WORKLOAD]).message()
    message.version = version
    return message


def served_by(ip: str, port: int, host: str, path: str) -> str:
    """The backend's name for a 200, else the status."""
    conn = http.client.HTTPConnection(ip, port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host})
        reply = conn.getresponse()
        body = reply.read().decode().strip()
        return body if reply.status == 200 else str(reply.status)
    finally:
        conn.close()


@contextlib.contextmanager
def backends(net: str) -> Iterator[dict[str, tuple[str, int]]]:
    """The victim's pod (`shop`) and tenant B's (`bsvc`), each naming itself."""
    with (
        identity_server(f"{net}.11", "shop") as shop,
        identity_server(f"{net}.12", "bsvc") as bsvc,
    ):
        yield {"shop": (f"{net}.11", shop), "bsvc": (f"{net}.12", bsvc)}


@pytest.mark.parametrize("kind", ["gateway", "ingress", "annotation", "restricted"])
def test_tenant_b_cannot_answer_the_victims_host(
    tmp_path: Path, haproxy_bin: HAProxyBinary, kind: str
) -> None:
    net = loopback_net()
    ip = f"{net}.1"
    with (
        backends(net) as ends,
        running_instance(tmp_path / "a", ip, POD, binary=haproxy_bin.path) as inst,
    ):
        port = free_port(ip)
        result = inst.applier.apply(_snapshot(kind, ip, ends, (port, free_port(ip))))
        assert result.ok, result.error
        got = {
            (host, path): served_by(ip, port, host, path)
            for host, path in (
                (HOST, "/cart"),
                (HOST, "/api/items"),
                (HOST, "/other"),  # the victim's miss: a 404, not B's catch-all
                ("y.demo.example.com", "/"),  # the victim's wildcard, no rule: a 404
                ("other.example.com", "/"),  # nobody else's: B's (unless B is not allowed)
            )
        }
        assert got == {
            (HOST, "/cart"): "shop",
            (HOST, "/api/items"): "shop",
            (HOST, "/other"): "404",
            ("y.demo.example.com", "/"): "404",
            ("other.example.com", "/"): "404" if kind == "restricted" else "bsvc",
        }


def test_a_hostname_closed_on_a_running_haproxy_stops_its_lookup_at_once(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Tenant C's new listener for c.example.org (no route yet) takes the host from B's
    catch-all: one closed-host map entry more, through the runtime API, no reload."""
    net = loopback_net()
    ip = f"{net}.1"
    with (
        backends(net) as ends,
        running_instance(tmp_path / "a", ip, POD, binary=haproxy_bin.path) as inst,
    ):
        port, peer = free_port(ip), free_port(ip)
        assert inst.applier.apply(_snapshot("gateway", ip, ends, (port, peer))).ok
        assert served_by(ip, port, "c.example.org", "/") == "bsvc"
        late = gateway(
            "cgw", namespace="tenant-c", port=port, hostname="c.example.org", created=LATER
        )
        after = _snapshot("gateway", ip, ends, (port, peer), more=(late,), version=2)
        assert list(after.http_listeners[0].closed_hosts) == ["*.demo.example.com", "c.example.org"]
        result = inst.applier.apply(after)
        assert result.ok, result.error
        assert result.kind is ApplyPath.RUNTIME
        assert served_by(ip, port, "c.example.org", "/") == "404"
        assert served_by(ip, port, HOST, "/cart") == "shop"
        assert served_by(ip, port, "other.example.com", "/") == "bsvc"
