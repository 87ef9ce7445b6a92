"""Backend protocols and GRPCRoutes on a real HAProxy (each installed version), the whole
path: manifests through the folder source and compute to a snapshot the agent applies.

- A GRPCRoute's method and service matches route real gRPC calls (grpcio) over
  cleartext HTTP/2 (HAProxy detects the preface on the clear bind) and over TLS on an
  HTTPS listener (ALPN h2) to a gRPC server spoken to in HTTP/2 (`proto h2`); a method
  it does not match answers UNIMPLEMENTED.
- An HTTPRoute to a Service port with appProtocol `kubernetes.io/h2c` reaches the same
  gRPC server: the backend speaks cleartext HTTP/2.
- WebSocket handshakes and echoes (the `websockets` library) through HTTPRoutes to a
  `kubernetes.io/ws` port and a `kubernetes.io/wss` port (TLS to the server, not
  verified: its certificate is signed by a CA HAProxy is never told of).

docs/annotations.md, "Backend protocol" and "GRPCRoute".
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from controlplane.compute import compute
from controlplane.model import ObjectRef
from controlplane.publish.encode import encode
from controlplane.source.files import load_manifests
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import free_port
from tests.helpers.haproxy_env import Instance, loopback_net, running_instance
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.tls_certs import TestCA, make_ca

pytestmark = pytest.mark.haproxy

WORKLOAD = "haproxy-system/DaemonSet/haproxy"
SAY = "/test.Echo/Say"

MANIFESTS = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: haproxy, namespace: haproxy-system}}
spec:
  selector: {{matchLabels: {{app.kubernetes.io/component: haproxy}}}}
  template:
    metadata: {{labels: {{app.kubernetes.io/component: haproxy}}}}
    spec: {{containers: [{{name: haproxy, image: haproxy}}]}}
---
apiVersion: v1
kind: Pod
metadata:
  name: pod-a
  namespace: haproxy-system
  labels: {{app.kubernetes.io/component: haproxy}}
  ownerReferences:
    - {{apiVersion: apps/v1, kind: DaemonSet, name: haproxy, uid: u1, controller: true}}
spec: {{nodeName: node-a, containers: [{{name: haproxy, image: haproxy}}]}}
status: {{phase: Running, podIP: "{haproxy}"}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {{name: peerplane}}
spec: {{controllerName: peerplane.dev/gateway-controller}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: web, namespace: default}}
spec:
  gatewayClassName: peerplane
  listeners:
    - {{name: http, port: {port}, protocol: HTTP}}
    - name: https
      port: {tls_port}
      protocol: HTTPS
      tls: {{certificateRefs: [{{name: rpc-tls}}]}}
---
apiVersion: v1
kind: Secret
metadata: {{name: rpc-tls, namespace: default}}
type: kubernetes.io/tls
data: {{tls.crt: "{tls_crt}", tls.key: "{tls_key}"}}
---
apiVersion: v1
kind: Service
metadata: {{name: rpc, namespace: default}}
spec:
  ports:
    - {{name: grpc, port: 9000}}
    - {{name: h2c, port: 9001, appProtocol: kubernetes.io/h2c}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: rpc-a
  namespace: default
  labels: {{kubernetes.io/service-name: rpc}}
addressType: IPv4
ports: [{{name: grpc, port: {grpc_port}}}, {{name: h2c, port: {grpc_port}}}]
endpoints: [{{addresses: ["{grpc_ip}"], conditions: {{ready: true}}}}]
---
apiVersion: v1
kind: Service
metadata: {{name: media, namespace: default}}
spec:
  ports:
    - {{name: ws, port: 80, appProtocol: kubernetes.io/ws}}
    - {{name: wss, port: 443, appProtocol: kubernetes.io/wss}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: media-a
  namespace: default
  labels: {{kubernetes.io/service-name: media}}
addressType: IPv4
ports: [{{name: ws, port: {ws_port}}}, {{name: wss, port: {wss_port}}}]
endpoints: [{{addresses: ["{ws_ip}"], conditions: {{ready: true}}}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {{name: rpc, namespace: default}}
spec:
  parentRefs: [{{name: web}}]
  hostnames: [rpc.example.com]
  rules:
    - matches:
        - method: {{service: test.Echo, method: Say}}
        - method: {{service: grpc.health.v1.Health}}
      backendRefs: [{{name: rpc, port: 9000}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: h2c, namespace: default}}
spec:
  parentRefs: [{{name: web}}]
  hostnames: [h2c.example.com]
  rules:
    - backendRefs: [{{name: rpc, port: 9001}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: media, namespace: default}}
spec:
  parentRefs: [{{name: web}}]
  hostnames: [media.example.com]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /ws}}}}]
      backendRefs: [{{name: media, port: 80}}]
    - matches: [{{path: {{type: PathPrefix, value: /wss}}}}]
      backendRefs: [{{name: media, port: 443}}]
"""


@contextlib.contextmanager
def grpc_server(ip: str) -> Iterator[int]:
    """A gRPC server on `ip`: `test.Echo/Say` answers "echo:" and the request bytes, and
    the standard health service answers SERVING."""

    def say(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"echo:" + request

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "test.Echo", {"Say": grpc.unary_unary_rpc_method_handler(say)}
    )
    server.add_generic_rpc_handlers((handler,))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port(f"{ip}:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(0).wait(5)


def _echo(connection: ServerConnection) -> None:
    for message in connection:
        connection.send(f"echo:{message!s}")


@contextlib.contextmanager
def ws_servers(ip: str) -> Iterator[tuple[int, int]]:
    """A WebSocket echo server on `ip`, and one over TLS (a certificate of a CA nobody
    trusts); their ports."""
    leaf = make_ca("untrusted test CA").issue("media.default.svc")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "server.pem"
        path.write_bytes(leaf.cert_pem + leaf.key_pem)
        context.load_cert_chain(str(path))
    servers: list[Server] = [serve(_echo, ip, 0), serve(_echo, ip, 0, ssl=context)]
    threads = [threading.Thread(target=s.serve_forever) for s in servers]
    for t in threads:
        t.start()
    try:
        yield servers[0].socket.getsockname()[1], servers[1].socket.getsockname()[1]
    finally:
        for s in servers:
            s.shutdown()
        for t in threads:
            t.join(5)


@dataclass
class Site:
    inst: Instance
    port: int  # the Gateway's HTTP listener's
    tls_port: int  # its HTTPS listener's
    ca: TestCA  # signs the HTTPS listener's certificate

    def channel(self, host: str) -> grpc.Channel:
        """A cleartext HTTP/2 channel to the HTTP listener, `host` as the authority."""
        return grpc.insecure_channel(
            f"{self.inst.ip}:{self.port}", options=[("grpc.default_authority", host)]
        )

    def tls_channel(self, host: str) -> grpc.Channel:
        """An HTTP/2 over TLS channel (ALPN h2) to the HTTPS listener, SNI and authority
        `host`, trusting the test CA only."""
        credentials = grpc.ssl_channel_credentials(root_certificates=self.ca.pem)
        return grpc.secure_channel(
            f"{self.inst.ip}:{self.tls_port}",
            credentials,
            options=[("grpc.ssl_target_name_override", host), ("grpc.default_authority", host)],
        )

    def ws_echo(self, path: str, text: str) -> str:
        """One WebSocket handshake and echo through the listener, Host media.example.com."""
        sock = socket.create_connection((self.inst.ip, self.port), timeout=5)
        with connect(f"ws://media.example.com{path}", sock=sock, open_timeout=5) as ws:
            ws.send(text)
            return str(ws.recv(timeout=5))


def computed(source: Path, inst: Instance, peer_port: int) -> pb.Snapshot:
    """The workload's snapshot as the control plane computes it from `source`, its peer
    port moved to one free on this machine."""
    loaded = load_manifests(source, ObjectRef("haproxy-system", "haproxy-settings"))
    assert loaded.errors == []
    result = compute(loaded.state, {}, now=time.time())  # the certificate's dates hold
    content = encode({WORKLOAD: result.workloads[WORKLOAD]})[WORKLOAD]
    snap = pb.Snapshot()
    json_format.ParseDict(json_format.MessageToDict(content.message(version=1)), snap)
    assert [p.name for p in snap.peers.peers] == [inst.pod]
    snap.peers.port = peer_port
    snap.peers.peers[0].port = peer_port
    return snap


@pytest.fixture
def site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Site]:
    net = loopback_net()
    with (
        grpc_server(f"{net}.21") as grpc_port,
        ws_servers(f"{net}.22") as (ws_port, wss_port),
        running_instance(tmp_path / "a", f"{net}.1", "pod-a", binary=haproxy_bin.path) as inst,
    ):
        port, tls_port = free_port(inst.ip), free_port(inst.ip)
        ca = make_ca()
        leaf = ca.issue("rpc.example.com")
        source = tmp_path / "manifests"
        source.mkdir()
        (source / "all.yaml").write_text(
            MANIFESTS.format(
                haproxy=inst.ip,
                port=port,
                tls_port=tls_port,
                tls_crt=base64.b64encode(leaf.cert_pem).decode(),
                tls_key=base64.b64encode(leaf.key_pem).decode(),
                grpc_ip=f"{net}.21",
                grpc_port=grpc_port,
                ws_ip=f"{net}.22",
                ws_port=ws_port,
                wss_port=wss_port,
            )
        )
        snap = computed(source, inst, free_port(inst.ip))
        result = inst.applier.apply(snap)
        assert result.ok, result.error
        yield Site(inst, port, tls_port, ca)


def test_grpc_calls_through_a_grpcroute_and_an_h2c_port(site: Site) -> None:
    with site.channel("rpc.example.com") as channel:
        say = channel.unary_unary(SAY)
        assert say(b"hi", timeout=5) == b"echo:hi"
        check = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert check.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as unmatched:  # no rule: HAProxy's 404
            channel.unary_unary("/test.Echo/Other")(b"x", timeout=5)
        assert unmatched.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with site.channel("h2c.example.com") as channel:  # HTTPRoute, appProtocol h2c
        assert channel.unary_unary(SAY)(b"h2c", timeout=5) == b"echo:h2c"


def test_grpc_calls_over_tls_through_the_https_listener(site: Site) -> None:
    """The HTTPS listener offers ALPN h2: a gRPC client (which requires it) is served."""
    with site.tls_channel("rpc.example.com") as channel:
        assert channel.unary_unary(SAY)(b"tls", timeout=5) == b"echo:tls"


def test_websocket_upgrades_through_ws_and_wss_ports(site: Site) -> None:
    assert site.ws_echo("/ws", "plain") == "echo:plain"
    assert site.ws_echo("/wss", "over tls") == "echo:over tls"
