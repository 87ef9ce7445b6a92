"""Ingresses and IngressClasses (networking.k8s.io/v1) to model types.

The contract of `convert`: a document of the wrong shape raises `ManifestError` with a
one-line reason, never another exception (tests/source/test_manifests_fuzz.py). An
Ingress backend names a Service port by exactly one of number and name, or a resource
(kept as "Kind/name" for compute to report: not served).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.model import (
    Ingress,
    IngressBackend,
    IngressClass,
    IngressPath,
    IngressRule,
    IngressTLS,
)
from controlplane.source.convert import (
    Manifest,
    ManifestError,
    _annotations,
    _generation,
    _items,
    _map,
    _metadata,
    _namespace,
    _port,
    _required,
    _spec,
    _str,
    _strings,
    _timestamp,
)


def ingress_class_from(obj: Manifest) -> IngressClass:
    meta = _metadata(obj)
    spec = _spec(obj)
    return IngressClass(
        name=meta["name"],
        controller=_str(spec.get("controller"), "spec.controller"),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


def _ingress_backend(value: Any, what: str) -> IngressBackend:
    backend = _map(value, what)
    resource = backend.get("resource")
    service = backend.get("service")
    if resource is not None and service is not None:
        raise ManifestError(f"{what} has both service and resource")
    if resource is not None:
        ref = _map(resource, f"{what}.resource")
        kind = _required(ref.get("kind"), f"{what}.resource.kind")
        return IngressBackend(
            resource=f"{kind}/{_required(ref.get('name'), f'{what}.resource.name')}"
        )
    if service is None:
        raise ManifestError(f"{what} has neither service nor resource")
    svc = _map(service, f"{what}.service")
    port = _map(svc.get("port"), f"{what}.service.port")
    number = _port(port.get("number"), f"{what}.service.port.number", required=False)
    name = _str(port.get("name"), f"{what}.service.port.name")
    if bool(number) == bool(name):
        raise ManifestError(f"{what}.service.port needs exactly one of number and name")
    return IngressBackend(
        service_name=_required(svc.get("name"), f"{what}.service.name"),
        port_number=number,
        port_name=name,
    )


def _ingress_path(item: Mapping[str, Any], where: str) -> IngressPath:
    return IngressPath(
        path=_str(item.get("path"), f"{where}.path"),
        path_type=_required(item.get("pathType"), f"{where}.pathType"),
        backend=_ingress_backend(item.get("backend"), f"{where}.backend"),
    )


def _ingress_rule(item: Mapping[str, Any], where: str) -> IngressRule:
    http = _map(item.get("http"), f"{where}.http")
    return IngressRule(
        host=_str(item.get("host"), f"{where}.host"),
        paths=_items(http.get("paths"), f"{where}.http.paths", _ingress_path),
    )


def _ingress_tls(item: Mapping[str, Any], where: str) -> IngressTLS:
    return IngressTLS(
        hosts=_strings(item.get("hosts"), f"{where}.hosts"),
        secret_name=_str(item.get("secretName"), f"{where}.secretName"),
    )


def ingress_from(obj: Manifest) -> Ingress:
    meta = _metadata(obj)
    spec = _spec(obj)
    default = spec.get("defaultBackend")
    return Ingress(
        namespace=_namespace(meta),
        name=meta["name"],
        ingress_class_name=_str(spec.get("ingressClassName"), "spec.ingressClassName"),
        default_backend=None
        if default is None
        else _ingress_backend(default, "spec.defaultBackend"),
        rules=_items(spec.get("rules"), "spec.rules", _ingress_rule),
        tls=_items(spec.get("tls"), "spec.tls", _ingress_tls),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )
