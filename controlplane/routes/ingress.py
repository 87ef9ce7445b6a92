"""One Ingress of our class to candidate rules on the workload's HTTP port.

Rules: host (exact or `*.` wildcard of exactly one label, the Ingress API's rule; none:
any host) and paths of pathType Exact, Prefix
(element-wise) or ImplementationSpecific (served as Prefix). `defaultBackend` becomes the
listener's default backend (the oldest Ingress keeps it). A `resource` backend, a missing
Service or port keeps the path with an unresolved backend (a 500), reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.model import ANNOTATION_PREFIX, Ingress, IngressBackend, Service
from controlplane.routes.backends import Resolved, ServiceKey, service_port
from controlplane.routes.ownership import Claim
from controlplane.routes.placement import Placement
from controlplane.routes.precedence import Candidate, Origin
from controlplane.snapshot import RejectedInput, RoutePath, RouteRule, WeightedBackend
from peerplane import patterns

PATH_TYPES = {"Exact": "Exact", "Prefix": "PathPrefix", "ImplementationSpecific": "PathPrefix"}


@dataclass(slots=True)
class IngressOutcome:
    workload: str  # "" when the class names no workload
    problem: str = ""  # why it is not served at all
    candidates: list[Candidate] = field(default_factory=list)
    default_backend: str = ""
    rejections: list[RejectedInput] = field(default_factory=list)
    demand: set[ServiceKey] = field(default_factory=set)


def ingress_class(ingress: Ingress, placement: Placement) -> str:
    """The name of our class the Ingress belongs to, or ""."""
    name = ingress.ingress_class_name or placement.default_ingress_class
    return name if name in placement.ingress_classes else ""


def _backend(
    ingress: Ingress, backend: IngressBackend, services: Mapping[ServiceKey, Service]
) -> Resolved:
    if backend.resource:
        return Resolved("", message=f"resource backend {backend.resource} is not served")
    return service_port(
        services, ingress.namespace, backend.service_name, backend.port_number, backend.port_name
    )


def ingress_outcome(
    ingress: Ingress, placement: Placement, services: Mapping[ServiceKey, Service], port: int
) -> IngressOutcome | None:
    """What `ingress` adds on `port` of its workload; None when its class is not ours."""
    name = ingress_class(ingress, placement)
    if not name:
        return None
    verdict = placement.ingress_classes[name]
    origin = Origin("Ingress", ingress.namespace, ingress.name, "spec")
    if not verdict.ok:
        outcome = IngressOutcome("", problem=f"IngressClass {name}: {verdict.message}")
        outcome.rejections.append(origin.rejection(name, outcome.problem, "spec.ingressClassName"))
        return outcome
    outcome = IngressOutcome(verdict.message)
    rejections = outcome.rejections
    for key in ingress.annotations:
        if key.startswith(ANNOTATION_PREFIX):
            rejections.append(
                origin.rejection(
                    key, "haproxy.org annotations belong on the Service; ignored here", key
                )
            )

    def resolved(backend: IngressBackend, where: str) -> str:
        found = _backend(ingress, backend, services)
        if found.service is not None:
            outcome.demand.add(found.service)
        else:
            rejections.append(
                origin.rejection(
                    backend.service_name or backend.resource, f"{found.message}: a 500", where
                )
            )
        return found.backend

    if ingress.default_backend is not None:
        outcome.default_backend = resolved(ingress.default_backend, "spec.defaultBackend") or ""
    age = ingress.creation_timestamp or "~"
    source = f"Ingress {ingress.namespace}/{ingress.name}"
    for index, rule in enumerate(ingress.rules):
        where = f"spec.rules[{index}]"
        if rule.host and not patterns.is_route_host(rule.host):
            rejections.append(
                origin.rejection(
                    rule.host,
                    "not a lower-case host name or *. wildcard; rule not served",
                    f"{where}.host",
                )
            )
            continue
        for number, path in enumerate(rule.paths):
            at = f"{where}.http.paths[{number}]"
            kind = PATH_TYPES.get(path.path_type)
            value = path.path or "/"
            if kind is None or not patterns.is_path(value):
                rejections.append(
                    origin.rejection(
                        f"{path.path_type} {value}",
                        "not pathType Exact, Prefix or ImplementationSpecific with a path "
                        "peerplane serves; path not served",
                        at,
                    )
                )
                continue
            if kind == "PathPrefix" and value != "/":
                value = value.rstrip("/") or "/"
            backend = resolved(path.backend, f"{at}.backend")
            outcome.candidates.append(
                Candidate(
                    port,
                    RouteRule(
                        source=f"{source} rule {index} path {number}",
                        hostnames=(rule.host,) if rule.host else (),
                        path=RoutePath(kind, value),
                        backends=(WeightedBackend(backend, 1),),
                        single_label_wildcards=rule.host.startswith(patterns.WILDCARD_PREFIX),
                    ),
                    Origin("Ingress", ingress.namespace, ingress.name, at),
                    age,
                    (index, number),
                    Claim(age, ingress.namespace, source, rule.host),
                )
            )
    return outcome
