"""Gateway API routes (HTTPRoute, GRPCRoute, TLSRoute, TCPRoute) to model types.

The contract of `convert`: a document of the wrong shape raises `ManifestError` with a
one-line reason, never another exception (tests/source/test_manifests_fuzz.py). What
the CRDs default is filled in here (a match without a path is PathPrefix "/", a
backendRef without a weight weighs 1), and what they would refuse to store (a port past
65535) is refused, but for an HTTPRoute rule's values: an HTTPRoute's redirect port and
backendRef weights are kept as written, so compute refuses that rule alone and the
route's other rules serve. Values compute may not serve (a regex, an unknown filter, a
hostname that is not one) are kept as written: compute reports them and serves the rest
of the route. A TLSRoute's or TCPRoute's weight outside 0-1,000,000 refuses the object,
as the API server would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.model import (
    GATEWAY_GROUP,
    GRPCMethodMatch,
    GRPCRoute,
    GRPCRouteMatch,
    GRPCRouteRule,
    HeaderModifier,
    HTTPBackendRef,
    HTTPRoute,
    HTTPRouteFilter,
    HTTPRouteMatch,
    HTTPRouteRetry,
    HTTPRouteRule,
    HTTPRouteTimeouts,
    L4Rule,
    NameValueMatch,
    ParentRef,
    PathMatch,
    RequestRedirect,
    SessionPersistenceSpec,
    TCPRoute,
    TLSRoute,
    URLRewrite,
)
from controlplane.source.convert import (
    Manifest,
    ManifestError,
    _annotations,
    _generation,
    _int,
    _items,
    _list,
    _map,
    _metadata,
    _namespace,
    _number,
    _port,
    _required,
    _spec,
    _str,
    _strings,
    _text,
    _timestamp,
    shown,
)
from peerplane import patterns

MAX_WEIGHT = patterns.MAX_WEIGHT


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


def _path_modifier(value: Any, what: str) -> tuple[str, str]:
    """An HTTPPathModifier: its type and the value of that type's field."""
    path = _map(value, what)
    path_type = _str(path.get("type"), f"{what}.type")
    path_value = ""
    if path_type == "ReplaceFullPath":
        path_value = _str(path.get("replaceFullPath"), f"{what}.replaceFullPath")
    elif path_type == "ReplacePrefixMatch":
        path_value = _str(path.get("replacePrefixMatch"), f"{what}.replacePrefixMatch")
    return path_type, path_value


def _redirect(value: Any, what: str) -> RequestRedirect:
    redirect = _map(value, what)
    path_type, path_value = _path_modifier(redirect.get("path"), f"{what}.path")
    code = redirect.get("statusCode")
    return RequestRedirect(
        scheme=_str(redirect.get("scheme"), f"{what}.scheme"),
        hostname=_str(redirect.get("hostname"), f"{what}.hostname"),
        port=_number(redirect.get("port"), f"{what}.port"),
        status_code=302 if code is None else _int(code, f"{what}.statusCode"),
        path_type=path_type,
        path_value=path_value,
    )


def _url_rewrite(value: Any, what: str) -> URLRewrite:
    rewrite = _map(value, what)
    path_type, path_value = _path_modifier(rewrite.get("path"), f"{what}.path")
    return URLRewrite(
        hostname=_str(rewrite.get("hostname"), f"{what}.hostname"),
        path_type=path_type,
        path_value=path_value,
    )


def _filter(item: Mapping[str, Any], where: str) -> HTTPRouteFilter:
    kind = _required(item.get("type"), f"{where}.type")
    modifier = redirect = response = rewrite = None
    if kind == "RequestHeaderModifier":
        modifier = _header_modifier(
            item.get("requestHeaderModifier"), f"{where}.requestHeaderModifier"
        )
    elif kind == "RequestRedirect":
        redirect = _redirect(item.get("requestRedirect"), f"{where}.requestRedirect")
    elif kind == "ResponseHeaderModifier":
        response = _header_modifier(
            item.get("responseHeaderModifier"), f"{where}.responseHeaderModifier"
        )
    elif kind == "URLRewrite":
        rewrite = _url_rewrite(item.get("urlRewrite"), f"{where}.urlRewrite")
    return HTTPRouteFilter(
        type=kind,
        request_header_modifier=modifier,
        request_redirect=redirect,
        response_header_modifier=response,
        url_rewrite=rewrite,
    )


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


def _duration(value: Any, what: str) -> str | None:
    """A duration's text as written (an unquoted `5` is "5": compute refuses the rule for
    it, not the object); None when absent."""
    return None if value is None else _text(value, what)


def _timeouts(value: Any, what: str) -> HTTPRouteTimeouts | None:
    if value is None:
        return None
    timeouts = _map(value, what)
    return HTTPRouteTimeouts(
        request=_duration(timeouts.get("request"), f"{what}.request"),
        backend_request=_duration(timeouts.get("backendRequest"), f"{what}.backendRequest"),
    )


def _retry(value: Any, what: str) -> HTTPRouteRetry | None:
    if value is None:
        return None
    retry = _map(value, what)
    codes = _list(retry.get("codes"), f"{what}.codes")
    return HTTPRouteRetry(
        codes=tuple(_int(code, f"{what}.codes[{index}]") for index, code in enumerate(codes)),
        attempts=_number(retry.get("attempts"), f"{what}.attempts"),
        backoff=_duration(retry.get("backoff"), f"{what}.backoff"),
    )


def _session_persistence(value: Any, what: str) -> SessionPersistenceSpec | None:
    """A rule's sessionPersistence as written (the CRD's defaults filled in: type Cookie);
    compute checks the values and refuses what it cannot serve."""
    if value is None:
        return None
    found = _map(value, what)
    cookie = _map(found.get("cookieConfig"), f"{what}.cookieConfig")
    return SessionPersistenceSpec(
        type=_str(found.get("type"), f"{what}.type", "Cookie") or "Cookie",
        session_name=_str(found.get("sessionName"), f"{what}.sessionName"),
        absolute_timeout=_str(found.get("absoluteTimeout"), f"{what}.absoluteTimeout"),
        lifetime_type=_str(cookie.get("lifetimeType"), f"{what}.cookieConfig.lifetimeType"),
    )


def _rule(item: Mapping[str, Any], where: str) -> HTTPRouteRule:
    matches = _items(item.get("matches"), f"{where}.matches", _match)
    return HTTPRouteRule(
        matches=matches or (HTTPRouteMatch(),),
        filters=_items(item.get("filters"), f"{where}.filters", _filter),
        backend_refs=_items(item.get("backendRefs"), f"{where}.backendRefs", _backend_ref),
        name=_str(item.get("name"), f"{where}.name"),
        timeouts=_timeouts(item.get("timeouts"), f"{where}.timeouts"),
        retry=_retry(item.get("retry"), f"{where}.retry"),
        session_persistence=_session_persistence(
            item.get("sessionPersistence"), f"{where}.sessionPersistence"
        ),
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


def _grpc_match(item: Mapping[str, Any], where: str) -> GRPCRouteMatch:
    method = item.get("method")
    found: GRPCMethodMatch | None = None
    if method is not None:
        fields = _map(method, f"{where}.method")
        found = GRPCMethodMatch(
            type=_str(fields.get("type"), f"{where}.method.type", "Exact") or "Exact",
            service=_str(fields.get("service"), f"{where}.method.service"),
            method=_str(fields.get("method"), f"{where}.method.method"),
        )
    return GRPCRouteMatch(
        method=found, headers=_items(item.get("headers"), f"{where}.headers", _name_value_match)
    )


def _grpc_rule(item: Mapping[str, Any], where: str) -> GRPCRouteRule:
    matches = _items(item.get("matches"), f"{where}.matches", _grpc_match)
    return GRPCRouteRule(
        matches=matches or (GRPCRouteMatch(),),
        filters=_items(item.get("filters"), f"{where}.filters", _filter),
        backend_refs=_items(item.get("backendRefs"), f"{where}.backendRefs", _backend_ref),
        name=_str(item.get("name"), f"{where}.name"),
    )


def grpc_route_from(obj: Manifest) -> GRPCRoute:
    meta = _metadata(obj)
    spec = _spec(obj)
    rules = _items(spec.get("rules"), "spec.rules", _grpc_rule)
    return GRPCRoute(
        namespace=_namespace(meta),
        name=meta["name"],
        parent_refs=_items(spec.get("parentRefs"), "spec.parentRefs", _parent_ref),
        hostnames=_strings(spec.get("hostnames"), "spec.hostnames"),
        rules=rules or (GRPCRouteRule(),),
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
