"""Small builders for model objects, so tests read as cluster descriptions."""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.model import (
    ClusterState,
    ConfigMap,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    OwnerRef,
    Pod,
    PolicyTargetRef,
    ReplicaSet,
    Service,
    ServicePort,
    SourceIPPersistencePolicy,
    frozen_map,
)

SETTINGS_NS, SETTINGS_NAME = "haproxy-system", "haproxy-settings"


def service(
    name: str,
    namespace: str = "default",
    annotations: dict[str, str] | None = None,
    ports: Iterable[tuple[str, int]] = (("http", 80),),
    created: str = "2026-01-01T00:00:00Z",
    expose: bool = True,
) -> Service:
    notes = {"haproxy.org/expose": "true"} if expose else {}
    notes.update(annotations or {})
    return Service(
        namespace=namespace,
        name=name,
        ports=tuple(ServicePort(n, p) for n, p in ports),
        annotations=frozen_map(notes),
        creation_timestamp=created,
    )


def endpoint_slice(
    service_name: str,
    addresses: Iterable[str],
    port: int = 8888,
    port_name: str = "http",
    namespace: str = "default",
    not_ready: Iterable[str] = (),
    name: str | None = None,
    address_type: str = "IPv4",
) -> EndpointSlice:
    unready = set(not_ready)
    return EndpointSlice(
        namespace=namespace,
        name=name or f"{service_name}-slice",
        service_name=service_name,
        address_type=address_type,
        ports=(EndpointPort(port_name, port),),
        endpoints=tuple(Endpoint((a,), ready=a not in unready) for a in addresses),
    )


def haproxy_pod(
    name: str,
    ip: str,
    owner: tuple[str, str] = ("DaemonSet", "haproxy"),
    namespace: str = "haproxy-system",
    phase: str = "Running",
    deleting: bool = False,
) -> Pod:
    return Pod(
        namespace=namespace,
        name=name,
        ip=ip,
        phase=phase,
        owner=OwnerRef(*owner),
        deleting=deleting,
    )


def replica_set(name: str, deployment: str, namespace: str = "haproxy-system") -> ReplicaSet:
    return ReplicaSet(namespace, name, OwnerRef("Deployment", deployment))


def settings(**data: str) -> ConfigMap:
    return ConfigMap(SETTINGS_NS, SETTINGS_NAME, frozen_map(data))


def cluster(
    services: Iterable[Service] = (),
    slices: Iterable[EndpointSlice] = (),
    pods: Iterable[Pod] = (),
    replica_sets: Iterable[ReplicaSet] = (),
    config: ConfigMap | None = None,
) -> ClusterState:
    return ClusterState(
        services=tuple(services),
        endpoint_slices=tuple(slices),
        haproxy_pods=tuple(pods),
        replica_sets=tuple(replica_sets),
        settings=config,
    )


def persistence_policy(
    name: str,
    targets: Iterable[str | tuple[str, str]] = (),
    namespace: str = "default",
    table_size: str = "",
    expire: str = "",
    created: str = "2026-01-01T00:00:00Z",
    generation: int = 1,
    kind: str = "Service",
) -> SourceIPPersistencePolicy:
    """A SourceIPPersistencePolicy on each target: a Service name, or (name, port name)."""
    refs = tuple(
        PolicyTargetRef("", kind, t, "") if isinstance(t, str) else PolicyTargetRef("", kind, *t)
        for t in targets
    )
    return SourceIPPersistencePolicy(
        namespace=namespace,
        name=name,
        target_refs=refs,
        table_size=table_size,
        expire=expire,
        creation_timestamp=created,
        generation=generation,
    )


DEFAULT_PODS = (haproxy_pod("haproxy-a", "127.0.1.1"), haproxy_pod("haproxy-b", "127.0.1.2"))
WORKLOAD = "haproxy-system/DaemonSet/haproxy"

# docs/design.md's example backend ("Architecture"), as haproxy.cfg must render it.
DESIGN_BACKEND = """\
backend default_shop_http
  balance source
  stick on src
  stick-table type ip size 1m expire 1800000 peers localinstance
  server SRV_1 10.244.0.32:8888 id 1 enabled
  server SRV_2 10.244.0.33:8888 id 2 enabled
"""
