"""A route's backend references resolved to backend names, or why they are not.

A Service is found by namespace and name and its port by number (a backendRef's port, an
Ingress backend's port number or name); the backend is the one compute names for that
Service port (`<namespace>_<service>_<port name or number>`). A backendRef into another
namespace needs a ReferenceGrant there. Unresolved references keep their weight with an
empty name: their share of requests gets a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from controlplane.model import (
    GATEWAY_GROUP,
    GRPCRoute,
    HTTPBackendRef,
    HTTPRoute,
    ReferenceGrant,
    Service,
    ServicePort,
    TCPRoute,
    TLSRoute,
)
from controlplane.routes import names
from controlplane.settings.values import is_dns_label, is_port_name
from peerplane import limits
from peerplane.names import backend_name

ServiceKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Resolved:
    """A backend name ("" when unresolved) and, when unresolved, the ResolvedRefs reason
    and message."""

    backend: str
    service: ServiceKey | None = None
    reason: str = ""
    message: str = ""


def _servable_port(service: Service, port: ServicePort) -> Resolved:
    if port.protocol != "TCP" or (port.name and not is_port_name(port.name)):
        return Resolved(
            "",
            reason=names.BACKEND_NOT_FOUND,
            message=(
                f"Service {service.namespace}/{service.name} port {port.port} is not a TCP "
                "port with a DNS-label name"
            ),
        )
    if not is_dns_label(service.namespace) or not is_dns_label(service.name):
        return Resolved(
            "", reason=names.BACKEND_NOT_FOUND, message="Service name is not a DNS label"
        )
    name = backend_name(service.namespace, service.name, port.name, port.port)
    if not limits.is_proxy_name(name):
        return Resolved("", reason=names.BACKEND_NOT_FOUND, message="backend name too long")
    return Resolved(name, (service.namespace, service.name))


def service_port(
    services: Mapping[ServiceKey, Service],
    namespace: str,
    name: str,
    number: int,
    port_name: str = "",
) -> Resolved:
    """The backend of Service namespace/name's port `number` (or, when 0, `port_name`)."""
    service = services.get((namespace, name))
    if service is None:
        return Resolved(
            "", reason=names.BACKEND_NOT_FOUND, message=f"Service {namespace}/{name} not found"
        )
    for port in service.ports:
        if (number and port.port == number) or (not number and port.name == port_name):
            return _servable_port(service, port)
    wanted = number or port_name
    return Resolved(
        "",
        reason=names.BACKEND_NOT_FOUND,
        message=f"Service {namespace}/{name} has no port {wanted}",
    )


def granted(
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
    from_kind: str,
    from_namespace: str,
    to_namespace: str,
    to_name: str,
) -> bool:
    """Whether a ReferenceGrant in `to_namespace` lets a `from_kind` of `from_namespace`
    reference Service `to_name`."""
    for grant in grants.get(to_namespace, ()):
        if not any(
            f.group == GATEWAY_GROUP and f.kind == from_kind and f.namespace == from_namespace
            for f in grant.from_
        ):
            continue
        if any(t.group == "" and t.kind == "Service" and t.name in ("", to_name) for t in grant.to):
            return True
    return False


def resolve_backend(
    ref: HTTPBackendRef,
    route: HTTPRoute | GRPCRoute | TLSRoute | TCPRoute,
    services: Mapping[ServiceKey, Service],
    grants: Mapping[str, tuple[ReferenceGrant, ...]],
) -> Resolved:
    """A backendRef to a Service port's backend, or why not (ResolvedRefs reasons)."""
    kind = type(route).__name__
    namespace = ref.namespace or route.namespace
    if (ref.group, ref.kind) != names.SERVICE_KIND:
        return Resolved(
            "",
            reason=names.INVALID_KIND,
            message=f"backendRef kind {ref.group}/{ref.kind} is not a core Service",
        )
    if namespace != route.namespace and not granted(
        grants, kind, route.namespace, namespace, ref.name
    ):
        return Resolved(
            "",
            reason=names.REF_NOT_PERMITTED,
            message=(
                f"no ReferenceGrant in {namespace} lets {kind}s of {route.namespace} "
                f"reference Service {ref.name}"
            ),
        )
    if not ref.port:
        return Resolved(
            "",
            reason=names.BACKEND_NOT_FOUND,
            message=f"backendRef to Service {namespace}/{ref.name} has no port",
        )
    if ref.filters:
        return Resolved(
            "", reason=names.UNSUPPORTED_VALUE, message="backendRef filters are not served"
        )
    return service_port(services, namespace, ref.name, ref.port)
