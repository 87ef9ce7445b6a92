"""Route objects (Gateway API, Ingress, Namespace, TLS Secrets; plain JSON dicts) to
model types.

The same contract as `convert`: a document of the wrong shape raises `ManifestError` with
a one-line reason, never another exception (tests/source/test_manifests_fuzz.py). What the
CRDs or the API server default is filled in here (a match without a path is PathPrefix
"/", a backendRef without a weight weighs 1), and what they would refuse to store (a port
past 65535, a weight past 1,000,000) is refused, but for an HTTPRoute rule's values: an
HTTPRoute's redirect port and backendRef weights are kept as written, so compute refuses
that rule alone and the route's other rules serve. Values compute may not serve (a regex,
an unknown filter, a hostname that is not one) are kept as written: compute reports them
and serves the rest of the route. A Secret's certificate and key never reach a message:
what is wrong with them (absent, not base64) leaves them empty for compute to report.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from controlplane.model import (
    GATEWAY_GROUP,
    Gateway,
    GatewayAddress,
    GatewayClass,
    GatewayListener,
    HeaderModifier,
    HTTPBackendRef,
    HTTPRoute,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRule,
    Ingress,
    IngressBackend,
    IngressClass,
    IngressPath,
    IngressRule,
    IngressTLS,
    L4Rule,
    LabelSelector,
    Namespace,
    NameValueMatch,
    ParentRef,
    PathMatch,
    ReferenceGrant,
    ReferenceGrantFrom,
    ReferenceGrantTo,
    RequestRedirect,
    RouteGroupKind,
    SecretRef,
    SelectorRequirement,
    TCPRoute,
    TLSRoute,
    TLSSecret,
)
from controlplane.source.convert import (
    Manifest,
    ManifestError,
    _int,
    _list,
    _map,
    _metadata,
    _namespace,
    _str,
    _string_map,
    _text,
    shown,
)
from peerplane import patterns

T = TypeVar("T")

MAX_WEIGHT = patterns.MAX_WEIGHT
SELECTOR_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
TLS_MODES = frozenset({"Terminate", "Passthrough"})
TLS_SECRET_TYPE = "kubernetes.io/tls"


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


# ------------------------------------------------------------------ Gateway API


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
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


def _parent_ref(item: Mapping[str, Any], where: str) -> ParentRef:
    return ParentRef(
        name=_required(item.get("name"), f"{where}.name"),
        group=_str(item.get("group"), f"{where}.group", GATEWAY_GROUP),
        kind=_str(item.get("kind"), f"{where}.kind", "Gateway") or "Gateway",
        namespace=_str(item.get("namespace"), f"{where}.namespace"),
        section_name=_str(item.get("sectionName"), f"{where}.sectionName"),
        port=_port(item.get("port"), f"{where}.port", required=False),
    )


def _name_value_match(item: Mapping[str, Any], where: str) -> NameValueMatch:
    return NameValueMatch(
        type=_str(item.get("type"), f"{where}.type", "Exact") or "Exact",
        name=_required(item.get("name"), f"{where}.name"),
        value=_str(item.get("value"), f"{where}.value"),
    )


def _match(item: Mapping[str, Any], where: str) -> HTTPRouteMatch:
    path = _map(item.get("path"), f"{where}.path")
    return HTTPRouteMatch(
        path=PathMatch(
            type=_str(path.get("type"), f"{where}.path.type", "PathPrefix") or "PathPrefix",
            value=_str(path.get("value"), f"{where}.path.value", "/") or "/",
        ),
        headers=_items(item.get("headers"), f"{where}.headers", _name_value_match),
        query_params=_items(item.get("queryParams"), f"{where}.queryParams", _name_value_match),
        method=_str(item.get("method"), f"{where}.method"),
    )


def _header_pair(item: Mapping[str, Any], where: str) -> tuple[str, str]:
    return (
        _required(item.get("name"), f"{where}.name"),
        _str(item.get("value"), f"{where}.value"),
    )


def _header_modifier(value: Any, what: str) -> HeaderModifier:
    modifier = _map(value, what)
    return HeaderModifier(
        set=_items(modifier.get("set"), f"{what}.set", _header_pair),
        add=_items(modifier.get("add"), f"{what}.add", _header_pair),
        remove=_strings(modifier.get("remove"), f"{what}.remove"),
    )


def _redirect(value: Any, what: str) -> RequestRedirect:
    redirect = _map(value, what)
    path = _map(redirect.get("path"), f"{what}.path")
    path_type = _str(path.get("type"), f"{what}.path.type")
    path_value = ""
    if path_type == "ReplaceFullPath":
        path_value = _str(path.get("replaceFullPath"), f"{what}.path.replaceFullPath")
    elif path_type == "ReplacePrefixMatch":
        path_value = _str(path.get("replacePrefixMatch"), f"{what}.path.replacePrefixMatch")
    code = redirect.get("statusCode")
    return RequestRedirect(
        scheme=_str(redirect.get("scheme"), f"{what}.scheme"),
        hostname=_str(redirect.get("hostname"), f"{what}.hostname"),
        port=_number(redirect.get("port"), f"{what}.port"),
        status_code=302 if code is None else _int(code, f"{what}.statusCode"),
        path_type=path_type,
        path_value=path_value,
    )


def _filter(item: Mapping[str, Any], where: str) -> HTTPRouteFilter:
    kind = _required(item.get("type"), f"{where}.type")
    modifier = redirect = None
    if kind == "RequestHeaderModifier":
        modifier = _header_modifier(
            item.get("requestHeaderModifier"), f"{where}.requestHeaderModifier"
        )
    elif kind == "RequestRedirect":
        redirect = _redirect(item.get("requestRedirect"), f"{where}.requestRedirect")
    return HTTPRouteFilter(type=kind, request_header_modifier=modifier, request_redirect=redirect)


def _backend_ref(item: Mapping[str, Any], where: str) -> HTTPBackendRef:
    """An HTTPRoute backendRef, its weight as written (compute refuses its rule for one
    outside 0-1,000,000)."""
    weight = _number(item.get("weight"), f"{where}.weight")
    return HTTPBackendRef(
        name=_required(item.get("name"), f"{where}.name"),
        group=_str(item.get("group"), f"{where}.group"),
        kind=_str(item.get("kind"), f"{where}.kind", "Service") or "Service",
        namespace=_str(item.get("namespace"), f"{where}.namespace"),
        port=_port(item.get("port"), f"{where}.port", required=False),
        weight=1 if weight is None else weight,
        filters=_items(item.get("filters"), f"{where}.filters", _filter),
    )


def _rule(item: Mapping[str, Any], where: str) -> HTTPRouteRule:
    matches = _items(item.get("matches"), f"{where}.matches", _match)
    return HTTPRouteRule(
        matches=matches or (HTTPRouteMatch(),),
        filters=_items(item.get("filters"), f"{where}.filters", _filter),
        backend_refs=_items(item.get("backendRefs"), f"{where}.backendRefs", _backend_ref),
        name=_str(item.get("name"), f"{where}.name"),
    )


def http_route_from(obj: Manifest) -> HTTPRoute:
    meta = _metadata(obj)
    spec = _spec(obj)
    rules = _items(spec.get("rules"), "spec.rules", _rule)
    return HTTPRoute(
        namespace=_namespace(meta),
        name=meta["name"],
        parent_refs=_items(spec.get("parentRefs"), "spec.parentRefs", _parent_ref),
        hostnames=_strings(spec.get("hostnames"), "spec.hostnames"),
        rules=rules or (HTTPRouteRule(),),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


def _l4_backend_ref(item: Mapping[str, Any], where: str) -> HTTPBackendRef:
    """A TLSRoute or TCPRoute backendRef: an HTTPRoute's without filters (the CRD has no
    such field, so the API server drops one written). A weight outside 0-1,000,000 refuses
    the object, as the API server would."""
    ref = _backend_ref({k: v for k, v in item.items() if k != "filters"}, where)
    if not 0 <= ref.weight <= MAX_WEIGHT:
        raise ManifestError(f"{where}.weight {shown(ref.weight)} is not in 0-{MAX_WEIGHT}")
    return ref


def _l4_rule(item: Mapping[str, Any], where: str) -> L4Rule:
    refs = _items(item.get("backendRefs"), f"{where}.backendRefs", _l4_backend_ref)
    if not refs:
        raise ManifestError(f"{where}.backendRefs is empty (a rule needs at least one)")
    return L4Rule(backend_refs=refs, name=_str(item.get("name"), f"{where}.name"))


def _l4_rules(spec: Mapping[str, Any], kind: str) -> tuple[L4Rule, ...]:
    rules = _items(spec.get("rules"), "spec.rules", _l4_rule)
    if not rules:
        raise ManifestError(f"spec.rules is empty (a {kind} needs at least one)")
    return rules


def tls_route_from(obj: Manifest) -> TLSRoute:
    meta = _metadata(obj)
    spec = _spec(obj)
    return TLSRoute(
        namespace=_namespace(meta),
        name=meta["name"],
        parent_refs=_items(spec.get("parentRefs"), "spec.parentRefs", _parent_ref),
        hostnames=_strings(spec.get("hostnames"), "spec.hostnames"),
        rules=_l4_rules(spec, "TLSRoute"),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


def tcp_route_from(obj: Manifest) -> TCPRoute:
    meta = _metadata(obj)
    spec = _spec(obj)
    return TCPRoute(
        namespace=_namespace(meta),
        name=meta["name"],
        parent_refs=_items(spec.get("parentRefs"), "spec.parentRefs", _parent_ref),
        rules=_l4_rules(spec, "TCPRoute"),
        generation=_generation(meta),
        creation_timestamp=_timestamp(meta),
        annotations=_annotations(meta),
    )


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


# ------------------------------------------------------------------ Ingress


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


# ------------------------------------------------------------------ Secrets


def _decoded(data: Mapping[str, Any], key: str) -> bytes:
    """data[key] decoded from base64; b"" when absent, not a string or not base64 (compute
    reports an empty certificate or key). Never raises: the value is key material."""
    value = data.get(key)
    if not isinstance(value, str):
        return b""
    try:  # Go's decoder, the API server's, skips line breaks: so does this one
        return base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _plain(string_data: Mapping[str, Any], key: str) -> bytes | None:
    """stringData[key] as bytes (a manifest may carry the PEM as text; the API server
    moves it into data); None when absent or not a string."""
    value = string_data.get(key)
    if not isinstance(value, str):
        return None
    try:
        return value.encode()
    except UnicodeEncodeError:  # a lone surrogate from a hostile document
        return b""


def _secret_value(obj: Manifest, key: str) -> bytes:
    """stringData[key] when there (it wins, as the API server merges it), else data[key]."""
    string_data = obj.get("stringData")
    if isinstance(string_data, Mapping):
        plain = _plain(string_data, key)
        if plain is not None:
            return plain
    data = obj.get("data")
    return _decoded(data, key) if isinstance(data, Mapping) else b""


def tls_secret_from(obj: Manifest) -> TLSSecret:
    """A core v1 Secret: of type kubernetes.io/tls with its certificate and key as bytes,
    of any other type by name and type only (compute reports the type). Only a Secret that
    cannot be named raises; its data never reaches a ManifestError."""
    meta = _metadata(obj)
    written = obj.get("type")
    secret_type = written if isinstance(written, str) else ""
    if written is None:
        secret_type = "Opaque"  # the API server's default
    cert = key = b""
    if secret_type == TLS_SECRET_TYPE:
        cert, key = (_secret_value(obj, name) for name in ("tls.crt", "tls.key"))
    return TLSSecret(
        namespace=_namespace(meta),
        name=meta["name"],
        type=secret_type,
        cert_pem=cert,
        key_pem=key,
        resource_version=_text(meta.get("resourceVersion"), "metadata.resourceVersion"),
    )
