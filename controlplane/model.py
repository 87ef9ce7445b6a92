"""Typed, immutable cluster state: the only input of the computation.

Sources (a folder of manifests, the Kubernetes API) build a `ClusterState`; nothing past
this module sees a Kubernetes client object. Every collection is a tuple or a frozen
mapping so that a state can be shared between threads and compared for equality.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

ANNOTATION_PREFIX = "haproxy.org/"


def frozen_map(data: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy of `data` (annotations, labels, ConfigMap data)."""
    return MappingProxyType(dict(data or {}))


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """namespace/name of a namespaced object."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectRef:
        """Parse "namespace/name"; raises ValueError on anything else."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"expected NAMESPACE/NAME, got {text!r}")
        return cls(namespace, name)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """The controller owner of an object (ownerReferences entry with controller=true)."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class ServicePort:
    name: str  # "" when the Service has a single unnamed port
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True, slots=True)
class Service:
    namespace: str
    name: str
    ports: tuple[ServicePort, ...]
    annotations: Mapping[str, str] = field(default_factory=frozen_map)
    # RFC 3339 creationTimestamp; decides which Service keeps a contested host or port.
    creation_timestamp: str = ""

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class EndpointPort:
    name: str
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True, slots=True)
class Endpoint:
    addresses: tuple[str, ...]
    # Kubernetes semantics: a missing `ready` condition means ready.
    ready: bool = True
    terminating: bool = False
    target_pod: str = ""  # name of the pod behind the endpoint, for display only


@dataclass(frozen=True, slots=True)
class EndpointSlice:
    namespace: str
    name: str
    service_name: str  # label kubernetes.io/service-name
    address_type: str  # IPv4, IPv6 or FQDN
    ports: tuple[EndpointPort, ...]
    endpoints: tuple[Endpoint, ...]


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    ip: str  # "" while unassigned
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    owner: OwnerRef | None  # controller owner
    deleting: bool = False  # metadata.deletionTimestamp is set
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ReplicaSet:
    namespace: str
    name: str
    owner: OwnerRef | None


@dataclass(frozen=True, slots=True)
class ConfigMap:
    namespace: str
    name: str
    data: Mapping[str, str] = field(default_factory=frozen_map)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class ClusterState:
    """Everything the computation reads.

    `haproxy_pods` are the pods of the HAProxy workloads only (sources select them with
    the HAProxy label selector); `settings` is the settings ConfigMap, or None.
    """

    services: tuple[Service, ...] = ()
    endpoint_slices: tuple[EndpointSlice, ...] = ()
    haproxy_pods: tuple[Pod, ...] = ()
    replica_sets: tuple[ReplicaSet, ...] = ()
    settings: ConfigMap | None = None
