"""Gateway API objects that routes attach to (GatewayClass, Gateway, ReferenceGrant) and
Namespaces (whose labels a listener's allowedRoutes selector reads) to model types.

The contract of `convert`: a document of the wrong shape raises `ManifestError` with a
one-line reason, never another exception (tests/source/test_manifests_fuzz.py). What
the CRDs default is filled in here (a listener's allowedRoutes from Same, a tls block's
mode Terminate) and what they would refuse to store (a port past 65535, two listeners of
one name, a Gateway without listeners) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayAddress,
    GatewayClass,
    GatewayListener,
    LabelSelector,
    Namespace,
    ReferenceGrant,
    ReferenceGrantFrom,
    ReferenceGrantTo,
    RouteGroupKind,
    SecretRef,
    SelectorRequirement,
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
    _string_map,
    _strings,
    _timestamp,
    shown,
)

SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
TLS_MODES = frozenset({"Terminate", "Passthrough"})


# ------------------------------------------------------------------ label selectors


def _requirement(item: Mapping[str, Any], where: str) -> SelectorRequirement:
    operator = _required(item.get("operator"), f"{where}.operator")
    if operator not in SELECTOR_OPERATORS:
        raise ManifestError(
            f"{where}.operator {shown(operator)} is not one of {sorted(SELECTOR_OPERATORS)}"
        )
    return SelectorRequirement(
        key=_required(item.get("key"), f"{where}.key"),
        operator=operator,
        values=_strings(item.get("values"), f"{where}.values"),
    )


def label_selector_from(value: Any, what: str) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels, matchExpressions)."""
    selector = _map(value, what)
    return LabelSelector(
        match_labels=_string_map(selector.get("matchLabels"), f"{what}.matchLabels"),
        match_expressions=_items(
            selector.get("matchExpressions"), f"{what}.matchExpressions", _requirement
        ),
    )


def namespace_from(obj: Manifest) -> Namespace:
    meta = _metadata(obj)
    return Namespace(
        name=meta["name"],
        labels=_string_map(meta.get("labels"), "metadata.labels"),
        creation_timestamp=_timestamp(meta),
    )


# ------------------------------------------------------------------ Gateways


def gateway_class_from(obj: Manifest) -> GatewayClass:
    meta = _metadata(obj)
    spec = _spec(obj)
    return GatewayClass(
        name=meta["name"],
        controller_name=_required(spec.get("controllerName"), "spec.controllerName"),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


def _route_kind(item: Mapping[str, Any], where: str) -> RouteGroupKind:
    return RouteGroupKind(
        group=_str(item.get("group"), f"{where}.group", GATEWAY_GROUP),
        kind=_required(item.get("kind"), f"{where}.kind"),
    )


def _certificate_ref(item: Mapping[str, Any], where: str) -> SecretRef:
    return SecretRef(
        name=_required(item.get("name"), f"{where}.name"),
        namespace=_str(item.get("namespace"), f"{where}.namespace"),
        group=_str(item.get("group"), f"{where}.group"),
        kind=_str(item.get("kind"), f"{where}.kind", "Secret") or "Secret",
    )


# A listener's tls fields peerplane does not serve: set, they are reported and ignored.
TLS_NOT_SERVED = ("options", "frontendValidation")


def _listener_tls(
    item: Mapping[str, Any], where: str
) -> tuple[str, tuple[SecretRef, ...], tuple[str, ...]]:
    """(mode, certificateRefs, the fields set that are not served) of a listener's `tls`
    block; ("", (), ()) without one. The CRD defaults the mode to Terminate and refuses any
    other than Terminate and Passthrough."""
    if item.get("tls") is None:
        return "", (), ()
    tls = _map(item.get("tls"), f"{where}.tls")
    mode = _str(tls.get("mode"), f"{where}.tls.mode", "Terminate") or "Terminate"
    if mode not in TLS_MODES:
        raise ManifestError(f"{where}.tls.mode {shown(mode)} is not one of {sorted(TLS_MODES)}")
    refs = _items(tls.get("certificateRefs"), f"{where}.tls.certificateRefs", _certificate_ref)
    ignored = tuple(field for field in TLS_NOT_SERVED if tls.get(field))
    return mode, refs, ignored


def _listener(item: Mapping[str, Any], where: str) -> GatewayListener:
    allowed = _map(item.get("allowedRoutes"), f"{where}.allowedRoutes")
    namespaces = _map(allowed.get("namespaces"), f"{where}.allowedRoutes.namespaces")
    allowed_from = _str(namespaces.get("from"), f"{where}.allowedRoutes.namespaces.from", "Same")
    selector = None
    if namespaces.get("selector") is not None:
        selector = label_selector_from(
            namespaces.get("selector"), f"{where}.allowedRoutes.namespaces.selector"
        )
    tls_mode, certificate_refs, tls_ignored = _listener_tls(item, where)
    return GatewayListener(
        name=_required(item.get("name"), f"{where}.name"),
        port=_port(item.get("port"), f"{where}.port"),
        protocol=_required(item.get("protocol"), f"{where}.protocol"),
        hostname=_str(item.get("hostname"), f"{where}.hostname"),
        allowed_from=allowed_from or "Same",
        allowed_selector=selector,
        allowed_kinds=_items(allowed.get("kinds"), f"{where}.allowedRoutes.kinds", _route_kind),
        tls_mode=tls_mode,
        certificate_refs=certificate_refs,
        tls_ignored=tls_ignored,
    )


def _address(item: Mapping[str, Any], where: str) -> GatewayAddress:
    return GatewayAddress(
        type=_str(item.get("type"), f"{where}.type", "IPAddress") or "IPAddress",
        value=_required(item.get("value"), f"{where}.value"),
    )


def _status_addresses(obj: Manifest) -> tuple[GatewayAddress, ...]:
    """status.addresses of type IPAddress as written (ours, read back); an entry of
    another shape is skipped: a status never refuses its Gateway."""
    status = obj.get("status")
    found = status.get("addresses") if isinstance(status, Mapping) else None
    if not isinstance(found, list):
        return ()
    return tuple(
        GatewayAddress("IPAddress", item["value"])
        for item in found[:16]
        if isinstance(item, Mapping)
        and item.get("type", "IPAddress") == "IPAddress"
        and isinstance(item.get("value"), str)
    )


def gateway_from(obj: Manifest) -> Gateway:
    meta = _metadata(obj)
    spec = _spec(obj)
    listeners = _items(spec.get("listeners"), "spec.listeners", _listener)
    if not listeners:
        raise ManifestError("spec.listeners is empty (a Gateway needs at least one)")
    names = [listener.name for listener in listeners]
    for name in names:
        if names.count(name) > 1:
            raise ManifestError(f"spec.listeners: name {shown(name)} is used twice")
    return Gateway(
        namespace=_namespace(meta),
        name=meta["name"],
        gateway_class_name=_required(spec.get("gatewayClassName"), "spec.gatewayClassName"),
        listeners=listeners,
        addresses=_items(spec.get("addresses"), "spec.addresses", _address),
        status_addresses=_status_addresses(obj),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


# ------------------------------------------------------------------ ReferenceGrants


def _grant_from(item: Mapping[str, Any], where: str) -> ReferenceGrantFrom:
    return ReferenceGrantFrom(
        group=_str(item.get("group"), f"{where}.group"),
        kind=_required(item.get("kind"), f"{where}.kind"),
        namespace=_required(item.get("namespace"), f"{where}.namespace"),
    )


def _grant_to(item: Mapping[str, Any], where: str) -> ReferenceGrantTo:
    return ReferenceGrantTo(
        group=_str(item.get("group"), f"{where}.group"),
        kind=_required(item.get("kind"), f"{where}.kind"),
        name=_str(item.get("name"), f"{where}.name"),
    )


def reference_grant_from(obj: Manifest) -> ReferenceGrant:
    meta = _metadata(obj)
    spec = _spec(obj)
    return ReferenceGrant(
        namespace=_namespace(meta),
        name=meta["name"],
        from_=_items(spec.get("from"), "spec.from", _grant_from),
        to=_items(spec.get("to"), "spec.to", _grant_to),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
    )
