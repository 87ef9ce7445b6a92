"""The scale benchmark's cluster as a folder of manifests: pure text, one file per Service;
and the same cluster as API objects (`cluster_objects`) for the fake Kubernetes API server.

N Services, each exposed with its own host, `load-balance: source` and source-IP
persistence, each with one EndpointSlice of 20 ready endpoints in the same file; one
DaemonSet of two HAProxy pods; the settings ConfigMap. Health checks (`check`, on by
default for users) are the caller's choice (`checks`); left out, they stay on up to
`CHECKS_UP_TO` Services and are off above, where HAProxy would probe up to 160,000
addresses that nothing serves. The scale benchmark runs both side by side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.bench.common import loopback_ip

Obj = dict[str, Any]

ENDPOINTS = 20
ENDPOINT_BASE = 0x7F_50_00_00  # 127.80.0.0 + index: up to 8,000 x 20 endpoints
MOVED_ADDRESS = "127.90.0.1"  # where the changed endpoint moves (and back)
# The pods' owner, named as a real API server requires (apiVersion, kind, name and uid).
DAEMONSET_UID = "5c0b1c2e-7a52-4f0e-9d2b-3f6a1e8c4d01"
CHECKS_UP_TO = 100  # health checks on (the default) up to this many Services, off above


def checks_on(services: int) -> bool:
    return services <= CHECKS_UP_TO


def service_name(index: int) -> str:
    return f"svc-{index:05d}"


def endpoint_address(service: int, endpoint: int) -> str:
    return loopback_ip(service * ENDPOINTS + endpoint, base=ENDPOINT_BASE)


def service_file(index: int) -> str:
    """One Service and its EndpointSlice."""
    name = service_name(index)
    endpoints = "".join(
        f'  - addresses: ["{endpoint_address(index, e)}"]\n'
        "    conditions: {ready: true}\n"
        f"    targetRef: {{kind: Pod, name: {name}-{e}}}\n"
        for e in range(ENDPOINTS)
    )
    return (
        "apiVersion: v1\nkind: Service\nmetadata:\n"
        f"  name: {name}\n  namespace: default\n"
        '  creationTimestamp: "2026-01-01T00:00:00Z"\n'
        "  annotations:\n"
        '    haproxy.org/expose: "true"\n'
        f"    haproxy.org/hosts: {name}.example.com\n"
        "    haproxy.org/load-balance: source\n"
        '    haproxy.org/source-ip-persistence: "true"\n'
        "spec:\n  ports:\n    - name: http\n      port: 80\n      targetPort: 8888\n"
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n"
        f"  name: {name}-abc12\n  namespace: default\n"
        f"  labels:\n    kubernetes.io/service-name: {name}\n"
        "addressType: IPv4\nports:\n  - name: http\n    port: 8888\n    protocol: TCP\n"
        f"endpoints:\n{endpoints}"
    )


def haproxy_file(pods: tuple[tuple[str, str], ...]) -> str:
    """The DaemonSet and its pods, each on its own loopback address."""
    text = (
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: haproxy\n"
        "  namespace: haproxy-system\nspec:\n  selector:\n    matchLabels:\n"
        "      app.kubernetes.io/component: haproxy\n  template:\n    metadata:\n"
        "      labels:\n        app.kubernetes.io/component: haproxy\n"
        "    spec:\n      containers:\n        - name: haproxy\n          image: haproxy:2.6\n"
    )
    for i, (name, address) in enumerate(pods):
        text += (
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n"
            f"  name: {name}\n  namespace: haproxy-system\n"
            "  labels:\n    app.kubernetes.io/component: haproxy\n"
            "  ownerReferences:\n    - apiVersion: apps/v1\n      kind: DaemonSet\n"
            f"      name: haproxy\n      uid: {DAEMONSET_UID}\n      controller: true\n"
            f"spec:\n  nodeName: node-{i}\nstatus:\n  phase: Running\n  podIP: {address}\n"
        )
    return text


def settings_file(http_port: int, peer_port: int, checks: bool = False) -> str:
    return (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: haproxy-settings\n"
        "  namespace: haproxy-system\ndata:\n"
        f'  http-port: "{http_port}"\n  peer-port: "{peer_port}"\n'
        f'  check: "{str(checks).lower()}"\n'
        "  source-ip-persistence-size: 1m\n  source-ip-persistence-expire: 30m\n"
    )


def write_folder(
    directory: Path,
    services: int,
    pods: tuple[tuple[str, str], ...],
    http_port: int,
    peer_port: int,
    checks: bool | None = None,
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    checks = checks_on(services) if checks is None else checks
    settings = settings_file(http_port, peer_port, checks)
    (directory / "settings.yaml").write_text(settings)
    (directory / "haproxy.yaml").write_text(haproxy_file(pods))
    for index in range(services):
        (directory / f"{service_name(index)}.yaml").write_text(service_file(index))


# ------------------------------------------------ the same cluster as API objects


def service_objects(index: int) -> tuple[Obj, Obj]:
    """One Service and its EndpointSlice, as `service_file(index)` holds them."""
    name = service_name(index)
    svc: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {
                "haproxy.org/expose": "true",
                "haproxy.org/hosts": f"{name}.example.com",
                "haproxy.org/load-balance": "source",
                "haproxy.org/source-ip-persistence": "true",
            },
        },
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8888}]},
    }
    endpoints = [
        {
            "addresses": [endpoint_address(index, e)],
            "conditions": {"ready": True},
            "targetRef": {"kind": "Pod", "name": f"{name}-{e}"},
        }
        for e in range(ENDPOINTS)
    ]
    slice_: Obj = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": slice_name(index),
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": name},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8888, "protocol": "TCP"}],
        "endpoints": endpoints,
    }
    return svc, slice_


def slice_name(index: int) -> str:
    return f"{service_name(index)}-abc12"


def haproxy_pod_objects(pods: tuple[tuple[str, str], ...]) -> list[Obj]:
    """The HAProxy pods of `haproxy_file` (owned by DaemonSet haproxy; the API source
    reads the owner from the pod, the DaemonSet object itself is not watched)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "haproxy-system",
                "labels": {"app.kubernetes.io/component": "haproxy"},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "haproxy",
                        "uid": DAEMONSET_UID,
                        "controller": True,
                    }
                ],
            },
            "spec": {"nodeName": f"node-{i}"},
            "status": {"phase": "Running", "podIP": address},
        }
        for i, (name, address) in enumerate(pods)
    ]


def settings_object(http_port: int, peer_port: int, checks: bool = False) -> Obj:
    """The settings ConfigMap of `settings_file`."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "haproxy-settings", "namespace": "haproxy-system"},
        "data": {
            "http-port": str(http_port),
            "peer-port": str(peer_port),
            "check": str(checks).lower(),
            "source-ip-persistence-size": "1m",
            "source-ip-persistence-expire": "30m",
        },
    }


def cluster_objects(
    services: int,
    pods: tuple[tuple[str, str], ...],
    http_port: int,
    peer_port: int,
    checks: bool | None = None,
) -> Iterator[Obj]:
    """Every object of the folder `write_folder` writes, but the DaemonSet."""
    yield settings_object(http_port, peer_port, checks_on(services) if checks is None else checks)
    yield from haproxy_pod_objects(pods)
    for index in range(services):
        yield from service_objects(index)
