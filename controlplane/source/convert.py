"""Kubernetes objects (as plain JSON dicts) to model types.

Both sources use these: the files source feeds parsed YAML documents, the Kubernetes
source feeds the JSON the API server returns. A document that lacks what the model needs,
or holds a field of the wrong type anywhere, raises `ManifestError` with a one-line reason
a person can act on, and never any other exception (tests/source/test_manifests_fuzz.py). What
the API server would refuse to store (a Service port name like "8080") is refused here
too, since a folder of manifests has no API server in front of it.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from controlplane.model import (
    ConfigMap,
    Endpoint,
    EndpointPort,
    EndpointSlice,
    LoadBalancerIngress,
    OwnerRef,
    Pod,
    ReplicaSet,
    Service,
    ServicePort,
    frozen_map,
)
from peerplane.runtime import untrusted

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# The label deploy/base gives the HAProxy pods: what both sources select by default.
DEFAULT_HAPROXY_SELECTOR = "app.kubernetes.io/component=haproxy"

Manifest = Mapping[str, Any]
T = TypeVar("T")


class ManifestError(ValueError):
    """A Kubernetes object that cannot be turned into a model object."""


IANA_SVC_NAME = re.compile(r"(?!.*--)[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?")
"""A Service port name, as Kubernetes validates it (with at least one letter, below)."""
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""An EndpointSlice port name, as Kubernetes validates it."""
_SCALARS = (str, int, float, bool, datetime.date)


def shown(value: Any) -> str:
    """A value as a manifest error quotes it (strings in quotes): `untrusted.shown`."""
    return untrusted.shown(value, quoted=True)


def _map(value: Any, what: str) -> Mapping[str, Any]:
    """`value` if a map, {} if absent; anything else is a ManifestError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ManifestError(f"{what} is not a map but {shown(value)}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"{what} is not a list but {shown(value)}")
    return value


def _str(value: Any, what: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise ManifestError(f"{what} is not a string but {shown(value)}")
    return value


def _text(value: Any, what: str) -> str:
    """A scalar's text: YAML reads unquoted `true`, `5432` or a date as other types."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if not isinstance(value, _SCALARS):
        raise ManifestError(f"{what} is not a string but {shown(value)}")
    try:
        return str(value)
    except ValueError:  # an integer past Python's 4,300-digit conversion limit
        raise ManifestError(f"{what} is a huge integer") from None


def _metadata(obj: Manifest) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ManifestError(f"not a Kubernetes object (expected a map, got {shown(obj)})")
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise ManifestError("metadata.name is missing")
    return meta


def _namespace(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise ManifestError(f"metadata.namespace is not a string but {shown(namespace)}")
    return namespace or "default"


def _string_map(value: Any, what: str) -> Mapping[str, str]:
    # Annotation values may be written unquoted in YAML (true, 5432): keep their text.
    out: dict[str, str] = {}
    for key, item in _map(value, what).items():
        name = _text(key, f"a key of {what}")
        out[name] = _text(item, f"{what}[{shown(name)}]")
    return frozen_map(out)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{what} is not an integer: {shown(value)}")
    return value


# ------------------------------------------------------------------ shared field readers


def _items(value: Any, what: str, convert: Callable[[Mapping[str, Any], str], T]) -> tuple[T, ...]:
    """Each map of the list at `what`, converted with its own path for errors."""
    out: list[T] = []
    for index, item in enumerate(_list(value, what)):
        where = f"{what}[{index}]"
        if not isinstance(item, Mapping):
            raise ManifestError(f"{where} is not a map but {shown(item)}")
        out.append(convert(item, where))
    return tuple(out)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    items = _list(value, what)
    for index, item in enumerate(items):
        _str(item, f"{what}[{index}]")
    return tuple(items)


def _port(value: Any, what: str, required: bool = True) -> int:
    """A port number in 1-65535; 0 when absent and not required."""
    if value is None and not required:
        return 0
    port = _int(value, what)
    if not 1 <= port <= 65535:
        raise ManifestError(f"{what} {shown(port)} is not in 1-65535")
    return port


def _number(value: Any, what: str) -> int | None:
    """An integer as written (its range is compute's to check, one rule at a time); None
    when absent."""
    return None if value is None else _int(value, what)


def _generation(meta: Mapping[str, Any]) -> int:
    value = meta.get("generation")
    return 0 if value is None else _int(value, "metadata.generation")


def _timestamp(meta: Mapping[str, Any]) -> str:
    return _text(meta.get("creationTimestamp"), "metadata.creationTimestamp")


def _annotations(meta: Mapping[str, Any]) -> Mapping[str, str]:
    return _string_map(meta.get("annotations"), "metadata.annotations")


def _spec(obj: Manifest) -> Mapping[str, Any]:
    return _map(obj.get("spec"), "spec")


def _required(value: Any, what: str) -> str:
    text = _str(value, what)
    if not text:
        raise ManifestError(f"{what} is missing")
    return text


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


def is_service_port_name(name: str) -> bool:
    """Kubernetes' IANA_SVC_NAME: at most 15 characters of a-z, 0-9 and '-', at least one
    letter, no '-' at either end and no '--' (so "8080" never names a port)."""
    return bool(IANA_SVC_NAME.fullmatch(name)) and any("a" <= c <= "z" for c in name)


def _service_ports(spec: Mapping[str, Any]) -> tuple[ServicePort, ...]:
    """spec.ports, validated as the API server does before it stores a Service."""
    items = _list(spec.get("ports"), "spec.ports")
    ports: list[ServicePort] = []
    for index, item in enumerate(items):
        where = f"spec.ports[{index}]"
        if not isinstance(item, Mapping):
            raise ManifestError(f"{where} is not a map")
        entry: Mapping[str, Any] = item
        name = _str(entry.get("name"), f"{where}.name")
        if name and not is_service_port_name(name):
            raise ManifestError(
                f"{where}.name {shown(name)} is not a valid port name (at most 15 of a-z, "
                "0-9 and '-', with a letter, no '-' at either end, no '--')"
            )
        if not name and len(items) > 1:
            raise ManifestError(f"{where}.name is required when a Service has several ports")
        port = _int(entry.get("port"), f"{where}.port")
        if not 1 <= port <= 65535:
            raise ManifestError(f"{where}.port {shown(port)} is not in 1-65535")
        protocol = _str(entry.get("protocol"), f"{where}.protocol", "TCP")
        for other in ports:
            if name and other.name == name:
                raise ManifestError(f"{where}.name {shown(name)} is used twice")
            if (other.port, other.protocol) == (port, protocol):
                raise ManifestError(f"{where}: port {port}/{shown(protocol)} is listed twice")
        app_protocol = _str(entry.get("appProtocol"), f"{where}.appProtocol")
        ports.append(
            ServicePort(name=name, port=port, protocol=protocol, app_protocol=app_protocol)
        )
    return tuple(ports)


def _load_balancer(status: Mapping[str, Any]) -> tuple[LoadBalancerIngress, ...]:
    """status.loadBalancer.ingress: the entries with an IP or a hostname."""
    balancer = _map(status.get("loadBalancer"), "status.loadBalancer")
    found = []
    for index, item in enumerate(_list(balancer.get("ingress"), "status.loadBalancer.ingress")):
        where = f"status.loadBalancer.ingress[{index}]"
        entry = _map(item, where)
        ip = _str(entry.get("ip"), f"{where}.ip")
        hostname = _str(entry.get("hostname"), f"{where}.hostname")
        if ip or hostname:
            found.append(LoadBalancerIngress(ip=ip, hostname=hostname))
    return tuple(found)


def service_from(obj: Manifest) -> Service:
    meta = _metadata(obj)
    spec = _map(obj.get("spec"), "spec")
    return Service(
        namespace=_namespace(meta),
        name=meta["name"],
        ports=_service_ports(spec),
        annotations=_string_map(meta.get("annotations"), "metadata.annotations"),
        creation_timestamp=_timestamp(meta),
        selector=_string_map(spec.get("selector"), "spec.selector"),
        load_balancer=_load_balancer(_map(obj.get("status"), "status")),
    )


def _endpoint_ports(obj: Manifest) -> tuple[EndpointPort, ...]:
    ports = []
    for index, item in enumerate(_list(obj.get("ports"), "ports")):
        where = f"ports[{index}]"
        if not isinstance(item, Mapping):
            raise ManifestError(f"{where} is not a map")
        name = _str(item.get("name"), f"{where}.name")
        if name and not DNS_LABEL.fullmatch(name):
            raise ManifestError(f"{where}.name {shown(name)} is not a DNS label")
        ports.append(
            EndpointPort(
                name=name,
                port=_int(item.get("port"), f"{where}.port"),
                protocol=_str(item.get("protocol"), f"{where}.protocol", "TCP"),
            )
        )
    return tuple(ports)


def _endpoint(item: Any, index: int) -> Endpoint:
    """The endpoint at `index` of a slice. The shape the API server writes (a dict whose
    addresses are strings, conditions and targetRef dicts or absent) is taken as it is:
    160,000 endpoints at 8,000 Services are listed at every start, and the checks below
    with their messages cost twice the conversion. Anything else goes through them."""
    if type(item) is dict:
        addresses = item.get("addresses")
        conditions = item.get("conditions")
        target = item.get("targetRef")
        if (
            type(addresses) is list
            and (conditions is None or type(conditions) is dict)
            and (target is None or type(target) is dict)
            and all(type(a) is str for a in addresses)
        ):
            ready = None if conditions is None else conditions.get("ready")
            pod = None if target is None else target.get("name")
            if pod is None or type(pod) is str:
                return Endpoint(
                    addresses=tuple(addresses),
                    ready=ready is None or ready is True,
                    terminating=conditions is not None and conditions.get("terminating") is True,
                    target_pod=pod or "",
                )
    return _endpoint_checked(item, f"endpoints[{index}]")


def _endpoint_checked(item: Any, where: str) -> Endpoint:
    if not isinstance(item, Mapping):
        raise ManifestError(f"{where} is not a map")
    addresses = _list(item.get("addresses"), f"{where}.addresses")
    if not all(isinstance(a, str) for a in addresses):
        raise ManifestError(f"{where}.addresses is not a list of strings")
    conditions = _map(item.get("conditions"), f"{where}.conditions")
    ready = conditions.get("ready")
    target = _map(item.get("targetRef"), f"{where}.targetRef")
    return Endpoint(
        addresses=tuple(addresses),
        ready=ready is None or ready is True,
        terminating=conditions.get("terminating") is True,
        target_pod=_str(target.get("name"), f"{where}.targetRef.name"),
    )


def endpoint_slice_from(obj: Manifest) -> EndpointSlice:
    meta = _metadata(obj)
    labels = _string_map(meta.get("labels"), "metadata.labels")
    endpoints = _list(obj.get("endpoints"), "endpoints")
    return EndpointSlice(
        namespace=_namespace(meta),
        name=meta["name"],
        service_name=labels.get(SERVICE_NAME_LABEL, ""),
        address_type=_str(obj.get("addressType"), "addressType", "IPv4"),
        ports=_endpoint_ports(obj),
        endpoints=tuple(_endpoint(e, i) for i, e in enumerate(endpoints)),
    )


def pod_from(obj: Manifest) -> Pod:
    meta = _metadata(obj)
    status = _map(obj.get("status"), "status")
    spec = _map(obj.get("spec"), "spec")
    return Pod(
        namespace=_namespace(meta),
        name=meta["name"],
        ip=_str(status.get("podIP"), "status.podIP"),
        phase=_str(status.get("phase"), "status.phase", "Pending") or "Pending",
        owner=controller_owner(meta),
        deleting=bool(meta.get("deletionTimestamp")),
        node_name=_str(spec.get("nodeName"), "spec.nodeName"),
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        host_ip=_str(status.get("hostIP"), "status.hostIP"),
        host_network=spec.get("hostNetwork") is True,
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
