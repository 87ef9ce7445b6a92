"""Kubernetes objects (as plain JSON dicts) to model types.

Both sources use these: the files source feeds parsed YAML documents, the Kubernetes
source feeds the JSON the API server returns. A document that lacks what the model needs
raises `ManifestError` with a reason a person can act on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from controlplane.model import (
    ConfigMap,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    OwnerRef,
    Pod,
    ReplicaSet,
    Service,
    ServicePort,
    frozen_map,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

Manifest = Mapping[str, Any]


class ManifestError(ValueError):
    """A Kubernetes object that cannot be turned into a model object."""


def _metadata(obj: Manifest) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ManifestError("metadata.name is missing")
    return meta


def _namespace(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace") or "default"
    if not isinstance(namespace, str):
        raise ManifestError("metadata.namespace is not a string")
    return namespace


def _string_map(value: Any, what: str) -> Mapping[str, str]:
    if value is None:
        return frozen_map()
    if not isinstance(value, Mapping):
        raise ManifestError(f"{what} is not a map")
    # Annotation values may be written unquoted in YAML (true, 5432): keep their text.
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[str(key)] = "true" if item else "false"
        elif item is None:
            out[str(key)] = ""
        else:
            out[str(key)] = str(item)
    return frozen_map(out)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{what} is not an integer: {value!r}")
    return value


def controller_owner(meta: Mapping[str, Any]) -> OwnerRef | None:
    """The ownerReferences entry marked controller (or the only one)."""
    refs = meta.get("ownerReferences") or []
    if not isinstance(refs, list):
        raise ManifestError("metadata.ownerReferences is not a list")
    candidates = [r for r in refs if isinstance(r, Mapping)]
    chosen = [r for r in candidates if r.get("controller")] or candidates[:1]
    if not chosen:
        return None
    kind, name = chosen[0].get("kind"), chosen[0].get("name")
    if not isinstance(kind, str) or not isinstance(name, str):
        raise ManifestError("ownerReferences entry lacks kind or name")
    return OwnerRef(kind, name)


def service_from(obj: Manifest) -> Service:
    meta = _metadata(obj)
    spec = obj.get("spec") or {}
    ports: list[ServicePort] = []
    for item in spec.get("ports") or []:
        if not isinstance(item, Mapping):
            raise ManifestError("spec.ports entry is not a map")
        ports.append(
            ServicePort(
                name=str(item.get("name") or ""),
                port=_int(item.get("port"), "spec.ports[].port"),
                protocol=str(item.get("protocol") or "TCP"),
            )
        )
    return Service(
        namespace=_namespace(meta),
        name=meta["name"],
        ports=tuple(ports),
        annotations=_string_map(meta.get("annotations"), "metadata.annotations"),
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
    )


def endpoint_slice_from(obj: Manifest) -> EndpointSlice:
    meta = _metadata(obj)
    labels = _string_map(meta.get("labels"), "metadata.labels")
    ports = []
    for item in obj.get("ports") or []:
        if not isinstance(item, Mapping):
            raise ManifestError("ports entry is not a map")
        ports.append(
            EndpointPort(
                name=str(item.get("name") or ""),
                port=_int(item.get("port"), "ports[].port"),
                protocol=str(item.get("protocol") or "TCP"),
            )
        )
    endpoints = []
    for item in obj.get("endpoints") or []:
        if not isinstance(item, Mapping):
            raise ManifestError("endpoints entry is not a map")
        addresses = item.get("addresses") or []
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ManifestError("endpoints[].addresses is not a list of strings")
        conditions = item.get("conditions") or {}
        ready = conditions.get("ready")
        target = item.get("targetRef") or {}
        endpoints.append(
            Endpoint(
                addresses=tuple(addresses),
                ready=ready is None or ready is True,
                terminating=conditions.get("terminating") is True,
                target_pod=str(target.get("name") or "") if isinstance(target, Mapping) else "",
            )
        )
    return EndpointSlice(
        namespace=_namespace(meta),
        name=meta["name"],
        service_name=labels.get(SERVICE_NAME_LABEL, ""),
        address_type=str(obj.get("addressType") or "IPv4"),
        ports=tuple(ports),
        endpoints=tuple(endpoints),
    )


def pod_from(obj: Manifest) -> Pod:
    meta = _metadata(obj)
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    return Pod(
        namespace=_namespace(meta),
        name=meta["name"],
        ip=str(status.get("podIP") or ""),
        phase=str(status.get("phase") or "Pending"),
        owner=controller_owner(meta),
        deleting=bool(meta.get("deletionTimestamp")),
        node_name=str(spec.get("nodeName") or ""),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
    )


def replica_set_from(obj: Manifest) -> ReplicaSet:
    meta = _metadata(obj)
    return ReplicaSet(namespace=_namespace(meta), name=meta["name"], owner=controller_owner(meta))


def config_map_from(obj: Manifest) -> ConfigMap:
    meta = _metadata(obj)
    return ConfigMap(
        namespace=_namespace(meta),
        name=meta["name"],
        data=_string_map(obj.get("data"), "data"),
    )


# ---------------------------------------------------------------- label selectors

_SELECTOR_TERM = re.compile(
    r"^\s*(?P<key>[A-Za-z0-9./_-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[A-Za-z0-9._-]*))?\s*$"
)


def parse_selector(text: str) -> tuple[tuple[str, str, str], ...]:
    """Parse an equality-based label selector ("a=b,c!=d,e") into (key, op, value) terms.

    Set-based terms (`in`, `notin`) are not supported and raise ValueError, as does
    anything else that is not a selector.
    """
    terms: list[tuple[str, str, str]] = []
    for part in text.split(",") if text.strip() else []:
        match = _SELECTOR_TERM.fullmatch(part)
        if not match:
            raise ValueError(f"unsupported label selector term {part.strip()!r}")
        op = match["op"] or "exists"
        terms.append((match["key"], "=" if op == "==" else op, match["value"] or ""))
    return tuple(terms)


def selector_matches(terms: tuple[tuple[str, str, str], ...], labels: Mapping[str, str]) -> bool:
    for key, op, value in terms:
        if op == "exists" and key not in labels:
            return False
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
    return True
