from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Snapshot(_message.Message):
    __slots__ = ("workload", "version", "content_hash", "peers", "backends", "http_frontend", "tcp_frontends", "warnings", "http_listeners", "certificates", "tls_listeners", "route_groups")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    HTTP_FRONTEND_FIELD_NUMBER: _ClassVar[int]
    TCP_FRONTENDS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    HTTP_LISTENERS_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    TLS_LISTENERS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    workload: str
    version: int
    content_hash: str
    peers: PeerSection
    backends: _containers.RepeatedCompositeFieldContainer[Backend]
    http_frontend: HttpFrontend
    tcp_frontends: _containers.RepeatedCompositeFieldContainer[TcpFrontend]
    warnings: _containers.RepeatedCompositeFieldContainer[RejectedInput]
    http_listeners: _containers.RepeatedCompositeFieldContainer[HttpListener]
    certificates: _containers.RepeatedCompositeFieldContainer[Certificate]
    tls_listeners: _containers.RepeatedCompositeFieldContainer[TlsPassthroughListener]
    route_groups: _containers.RepeatedCompositeFieldContainer[RouteGroup]
    def __init__(self, workload: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., peers: _Optional[_Union[PeerSection, _Mapping]] = ..., backends: _Optional[_Iterable[_Union[Backend, _Mapping]]] = ..., http_frontend: _Optional[_Union[HttpFrontend, _Mapping]] = ..., tcp_frontends: _Optional[_Iterable[_Union[TcpFrontend, _Mapping]]] = ..., warnings: _Optional[_Iterable[_Union[RejectedInput, _Mapping]]] = ..., http_listeners: _Optional[_Iterable[_Union[HttpListener, _Mapping]]] = ..., certificates: _Optional[_Iterable[_Union[Certificate, _Mapping]]] = ..., tls_listeners: _Optional[_Iterable[_Union[TlsPassthroughListener, _Mapping]]] = ..., route_groups: _Optional[_Iterable[_Union[RouteGroup, _Mapping]]] = ...) -> None: ...

class RouteGroup(_message.Message):
    __slots__ = ("listener", "host", "rules")
    LISTENER_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    listener: str
    host: str
    rules: _containers.RepeatedCompositeFieldContainer[RouteRule]
    def __init__(self, listener: _Optional[str] = ..., host: _Optional[str] = ..., rules: _Optional[_Iterable[_Union[RouteRule, _Mapping]]] = ...) -> None: ...

class PeerSection(_message.Message):
    __slots__ = ("name", "port", "peers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    port: int
    peers: _containers.RepeatedCompositeFieldContainer[Peer]
    def __init__(self, name: _Optional[str] = ..., port: _Optional[int] = ..., peers: _Optional[_Iterable[_Union[Peer, _Mapping]]] = ...) -> None: ...

class Peer(_message.Message):
    __slots__ = ("name", "address", "port")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    port: int
    def __init__(self, name: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class Backend(_message.Message):
    __slots__ = ("name", "service", "service_port", "mode", "balance", "balance_argument", "hash_type", "persistence", "slots", "warnings", "check", "session_cookie", "session_header", "protocol", "section", "spare")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_PORT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    BALANCE_FIELD_NUMBER: _ClassVar[int]
    BALANCE_ARGUMENT_FIELD_NUMBER: _ClassVar[int]
    HASH_TYPE_FIELD_NUMBER: _ClassVar[int]
    PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    CHECK_FIELD_NUMBER: _ClassVar[int]
    SESSION_COOKIE_FIELD_NUMBER: _ClassVar[int]
    SESSION_HEADER_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SECTION_FIELD_NUMBER: _ClassVar[int]
    SPARE_FIELD_NUMBER: _ClassVar[int]
    name: str
    service: str
    service_port: str
    mode: str
    balance: str
    balance_argument: str
    hash_type: str
    persistence: Persistence
    slots: _containers.RepeatedCompositeFieldContainer[Slot]
    warnings: _containers.RepeatedCompositeFieldContainer[RejectedInput]
    check: HealthCheck
    session_cookie: SessionCookie
    session_header: SessionHeader
    protocol: str
    section: str
    spare: bool
    def __init__(self, name: _Optional[str] = ..., service: _Optional[str] = ..., service_port: _Optional[str] = ..., mode: _Optional[str] = ..., balance: _Optional[str] = ..., balance_argument: _Optional[str] = ..., hash_type: _Optional[str] = ..., persistence: _Optional[_Union[Persistence, _Mapping]] = ..., slots: _Optional[_Iterable[_Union[Slot, _Mapping]]] = ..., warnings: _Optional[_Iterable[_Union[RejectedInput, _Mapping]]] = ..., check: _Optional[_Union[HealthCheck, _Mapping]] = ..., session_cookie: _Optional[_Union[SessionCookie, _Mapping]] = ..., session_header: _Optional[_Union[SessionHeader, _Mapping]] = ..., protocol: _Optional[str] = ..., section: _Optional[str] = ..., spare: _Optional[bool] = ...) -> None: ...

class SessionCookie(_message.Message):
    __slots__ = ("name", "max_age_s", "max_life_s", "max_idle_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_LIFE_S_FIELD_NUMBER: _ClassVar[int]
    MAX_IDLE_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_age_s: int
    max_life_s: int
    max_idle_s: int
    def __init__(self, name: _Optional[str] = ..., max_age_s: _Optional[int] = ..., max_life_s: _Optional[int] = ..., max_idle_s: _Optional[int] = ...) -> None: ...

class SessionHeader(_message.Message):
    __slots__ = ("name", "table_size", "expire_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    table_size: int
    expire_ms: int
    def __init__(self, name: _Optional[str] = ..., table_size: _Optional[int] = ..., expire_ms: _Optional[int] = ...) -> None: ...

class HealthCheck(_message.Message):
    __slots__ = ("interval_ms", "rise", "fall", "http_path")
    INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    RISE_FIELD_NUMBER: _ClassVar[int]
    FALL_FIELD_NUMBER: _ClassVar[int]
    HTTP_PATH_FIELD_NUMBER: _ClassVar[int]
    interval_ms: int
    rise: int
    fall: int
    http_path: str
    def __init__(self, interval_ms: _Optional[int] = ..., rise: _Optional[int] = ..., fall: _Optional[int] = ..., http_path: _Optional[str] = ...) -> None: ...

class Persistence(_message.Message):
    __slots__ = ("table_size", "expire_ms")
    TABLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_MS_FIELD_NUMBER: _ClassVar[int]
    table_size: int
    expire_ms: int
    def __init__(self, table_size: _Optional[int] = ..., expire_ms: _Optional[int] = ...) -> None: ...

class Slot(_message.Message):
    __slots__ = ("index", "server_name", "address", "port", "enabled")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SERVER_NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    index: int
    server_name: str
    address: str
    port: int
    enabled: bool
    def __init__(self, index: _Optional[int] = ..., server_name: _Optional[str] = ..., address: _Optional[str] = ..., port: _Optional[int] = ..., enabled: _Optional[bool] = ...) -> None: ...

class HttpFrontend(_message.Message):
    __slots__ = ("port", "routes")
    PORT_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    port: int
    routes: _containers.RepeatedCompositeFieldContainer[HostRoute]
    def __init__(self, port: _Optional[int] = ..., routes: _Optional[_Iterable[_Union[HostRoute, _Mapping]]] = ...) -> None: ...

class HostRoute(_message.Message):
    __slots__ = ("host", "backend")
    HOST_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    host: str
    backend: str
    def __init__(self, host: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class TcpFrontend(_message.Message):
    __slots__ = ("port", "backend", "source", "accept_proxy")
    PORT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_PROXY_FIELD_NUMBER: _ClassVar[int]
    port: int
    backend: str
    source: str
    accept_proxy: bool
    def __init__(self, port: _Optional[int] = ..., backend: _Optional[str] = ..., source: _Optional[str] = ..., accept_proxy: _Optional[bool] = ...) -> None: ...

class HttpListener(_message.Message):
    __slots__ = ("port", "rules", "default_backend", "tls", "accept_proxy", "closed_hosts", "address")
    PORT_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BACKEND_FIELD_NUMBER: _ClassVar[int]
    TLS_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_PROXY_FIELD_NUMBER: _ClassVar[int]
    CLOSED_HOSTS_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    port: int
    rules: _containers.RepeatedCompositeFieldContainer[RouteRule]
    default_backend: str
    tls: TlsTermination
    accept_proxy: bool
    closed_hosts: _containers.RepeatedScalarFieldContainer[str]
    address: str
    def __init__(self, port: _Optional[int] = ..., rules: _Optional[_Iterable[_Union[RouteRule, _Mapping]]] = ..., default_backend: _Optional[str] = ..., tls: _Optional[_Union[TlsTermination, _Mapping]] = ..., accept_proxy: _Optional[bool] = ..., closed_hosts: _Optional[_Iterable[str]] = ..., address: _Optional[str] = ...) -> None: ...

class TlsTermination(_message.Message):
    __slots__ = ("certificates", "strict_sni")
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    STRICT_SNI_FIELD_NUMBER: _ClassVar[int]
    certificates: _containers.RepeatedCompositeFieldContainer[CertificateBinding]
    strict_sni: bool
    def __init__(self, certificates: _Optional[_Iterable[_Union[CertificateBinding, _Mapping]]] = ..., strict_sni: _Optional[bool] = ...) -> None: ...

class CertificateBinding(_message.Message):
    __slots__ = ("certificate", "hostnames")
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    HOSTNAMES_FIELD_NUMBER: _ClassVar[int]
    certificate: str
    hostnames: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, certificate: _Optional[str] = ..., hostnames: _Optional[_Iterable[str]] = ...) -> None: ...

class Certificate(_message.Message):
    __slots__ = ("name", "secret", "fingerprint", "serial", "not_after", "dns_names", "pem")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    SERIAL_FIELD_NUMBER: _ClassVar[int]
    NOT_AFTER_FIELD_NUMBER: _ClassVar[int]
    DNS_NAMES_FIELD_NUMBER: _ClassVar[int]
    PEM_FIELD_NUMBER: _ClassVar[int]
    name: str
    secret: str
    fingerprint: str
    serial: str
    not_after: str
    dns_names: _containers.RepeatedScalarFieldContainer[str]
    pem: bytes
    def __init__(self, name: _Optional[str] = ..., secret: _Optional[str] = ..., fingerprint: _Optional[str] = ..., serial: _Optional[str] = ..., not_after: _Optional[str] = ..., dns_names: _Optional[_Iterable[str]] = ..., pem: _Optional[bytes] = ...) -> None: ...

class TlsPassthroughListener(_message.Message):
    __slots__ = ("port", "routes", "accept_proxy")
    PORT_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_PROXY_FIELD_NUMBER: _ClassVar[int]
    port: int
    routes: _containers.RepeatedCompositeFieldContainer[SniRoute]
    accept_proxy: bool
    def __init__(self, port: _Optional[int] = ..., routes: _Optional[_Iterable[_Union[SniRoute, _Mapping]]] = ..., accept_proxy: _Optional[bool] = ...) -> None: ...

class SniRoute(_message.Message):
    __slots__ = ("source", "hostnames", "backends")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    HOSTNAMES_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    source: str
    hostnames: _containers.RepeatedScalarFieldContainer[str]
    backends: _containers.RepeatedCompositeFieldContainer[WeightedBackend]
    def __init__(self, source: _Optional[str] = ..., hostnames: _Optional[_Iterable[str]] = ..., backends: _Optional[_Iterable[_Union[WeightedBackend, _Mapping]]] = ...) -> None: ...

class RouteRule(_message.Message):
    __slots__ = ("source", "hostnames", "path", "method", "headers", "query_params", "backends", "request_headers", "redirect", "single_label_wildcards", "url_rewrite", "response_headers", "timeouts")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    HOSTNAMES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    QUERY_PARAMS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HEADERS_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_FIELD_NUMBER: _ClassVar[int]
    SINGLE_LABEL_WILDCARDS_FIELD_NUMBER: _ClassVar[int]
    URL_REWRITE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUTS_FIELD_NUMBER: _ClassVar[int]
    source: str
    hostnames: _containers.RepeatedScalarFieldContainer[str]
    path: PathMatch
    method: str
    headers: _containers.RepeatedCompositeFieldContainer[NameValue]
    query_params: _containers.RepeatedCompositeFieldContainer[NameValue]
    backends: _containers.RepeatedCompositeFieldContainer[WeightedBackend]
    request_headers: HeaderModifier
    redirect: Redirect
    single_label_wildcards: bool
    url_rewrite: URLRewrite
    response_headers: HeaderModifier
    timeouts: Timeouts
    def __init__(self, source: _Optional[str] = ..., hostnames: _Optional[_Iterable[str]] = ..., path: _Optional[_Union[PathMatch, _Mapping]] = ..., method: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[NameValue, _Mapping]]] = ..., query_params: _Optional[_Iterable[_Union[NameValue, _Mapping]]] = ..., backends: _Optional[_Iterable[_Union[WeightedBackend, _Mapping]]] = ..., request_headers: _Optional[_Union[HeaderModifier, _Mapping]] = ..., redirect: _Optional[_Union[Redirect, _Mapping]] = ..., single_label_wildcards: _Optional[bool] = ..., url_rewrite: _Optional[_Union[URLRewrite, _Mapping]] = ..., response_headers: _Optional[_Union[HeaderModifier, _Mapping]] = ..., timeouts: _Optional[_Union[Timeouts, _Mapping]] = ...) -> None: ...

class Timeouts(_message.Message):
    __slots__ = ("server_timeout_ms",)
    SERVER_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    server_timeout_ms: int
    def __init__(self, server_timeout_ms: _Optional[int] = ...) -> None: ...

class PathMatch(_message.Message):
    __slots__ = ("type", "value")
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PATH_PREFIX: _ClassVar[PathMatch.Type]
        EXACT: _ClassVar[PathMatch.Type]
    PATH_PREFIX: PathMatch.Type
    EXACT: PathMatch.Type
    TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    type: PathMatch.Type
    value: str
    def __init__(self, type: _Optional[_Union[PathMatch.Type, str]] = ..., value: _Optional[str] = ...) -> None: ...

class NameValue(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class WeightedBackend(_message.Message):
    __slots__ = ("backend", "weight")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    backend: str
    weight: int
    def __init__(self, backend: _Optional[str] = ..., weight: _Optional[int] = ...) -> None: ...

class HeaderModifier(_message.Message):
    __slots__ = ("set", "add", "remove")
    SET_FIELD_NUMBER: _ClassVar[int]
    ADD_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    set: _containers.RepeatedCompositeFieldContainer[NameValue]
    add: _containers.RepeatedCompositeFieldContainer[NameValue]
    remove: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, set: _Optional[_Iterable[_Union[NameValue, _Mapping]]] = ..., add: _Optional[_Iterable[_Union[NameValue, _Mapping]]] = ..., remove: _Optional[_Iterable[str]] = ...) -> None: ...

class Redirect(_message.Message):
    __slots__ = ("scheme", "hostname", "port", "status_code", "replace_full_path", "replace_prefix_match")
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FULL_PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACE_PREFIX_MATCH_FIELD_NUMBER: _ClassVar[int]
    scheme: str
    hostname: str
    port: int
    status_code: int
    replace_full_path: str
    replace_prefix_match: str
    def __init__(self, scheme: _Optional[str] = ..., hostname: _Optional[str] = ..., port: _Optional[int] = ..., status_code: _Optional[int] = ..., replace_full_path: _Optional[str] = ..., replace_prefix_match: _Optional[str] = ...) -> None: ...

class URLRewrite(_message.Message):
    __slots__ = ("hostname", "path")
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    hostname: str
    path: PathRewrite
    def __init__(self, hostname: _Optional[str] = ..., path: _Optional[_Union[PathRewrite, _Mapping]] = ...) -> None: ...

class PathRewrite(_message.Message):
    __slots__ = ("replace_full_path", "replace_prefix_match")
    REPLACE_FULL_PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACE_PREFIX_MATCH_FIELD_NUMBER: _ClassVar[int]
    replace_full_path: str
    replace_prefix_match: str
    def __init__(self, replace_full_path: _Optional[str] = ..., replace_prefix_match: _Optional[str] = ...) -> None: ...

class RejectedInput(_message.Message):
    __slots__ = ("object", "key", "value", "reason")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    object: str
    key: str
    value: str
    reason: str
    def __init__(self, object: _Optional[str] = ..., key: _Optional[str] = ..., value: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AgentMessage(_message.Message):
    __slots__ = ("hello", "ack", "nack", "report")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    ack: Ack
    nack: Nack
    report: AgentReport
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., nack: _Optional[_Union[Nack, _Mapping]] = ..., report: _Optional[_Union[AgentReport, _Mapping]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("pod_namespace", "pod_name", "node_name", "applied_content_hash", "applied_version", "agent_version", "accepts_deltas", "haproxy_version", "contract", "partial_reports")
    POD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    POD_NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    APPLIED_CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_DELTAS_FIELD_NUMBER: _ClassVar[int]
    HAPROXY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_REPORTS_FIELD_NUMBER: _ClassVar[int]
    pod_namespace: str
    pod_name: str
    node_name: str
    applied_content_hash: str
    applied_version: int
    agent_version: str
    accepts_deltas: bool
    haproxy_version: str
    contract: int
    partial_reports: bool
    def __init__(self, pod_namespace: _Optional[str] = ..., pod_name: _Optional[str] = ..., node_name: _Optional[str] = ..., applied_content_hash: _Optional[str] = ..., applied_version: _Optional[int] = ..., agent_version: _Optional[str] = ..., accepts_deltas: _Optional[bool] = ..., haproxy_version: _Optional[str] = ..., contract: _Optional[int] = ..., partial_reports: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("nonce", "version", "content_hash", "applied_by", "set_aside", "set_aside_count")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_BY_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_COUNT_FIELD_NUMBER: _ClassVar[int]
    nonce: str
    version: int
    content_hash: str
    applied_by: str
    set_aside: _containers.RepeatedCompositeFieldContainer[SetAsidePart]
    set_aside_count: int
    def __init__(self, nonce: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., applied_by: _Optional[str] = ..., set_aside: _Optional[_Iterable[_Union[SetAsidePart, _Mapping]]] = ..., set_aside_count: _Optional[int] = ...) -> None: ...

class SetAsidePart(_message.Message):
    __slots__ = ("kind", "name", "fingerprint", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    fingerprint: str
    reason: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., fingerprint: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ("nonce", "version", "content_hash", "error", "resync")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    nonce: str
    version: int
    content_hash: str
    error: str
    resync: bool
    def __init__(self, nonce: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., error: _Optional[str] = ..., resync: _Optional[bool] = ...) -> None: ...

class AgentReport(_message.Message):
    __slots__ = ("haproxy_version", "last_applied_by", "last_applied_at", "peer_sessions", "tables", "observed_at", "sequence", "partial", "removed_tables", "peers_changed")
    HAPROXY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_BY_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_AT_FIELD_NUMBER: _ClassVar[int]
    PEER_SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    REMOVED_TABLES_FIELD_NUMBER: _ClassVar[int]
    PEERS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    haproxy_version: str
    last_applied_by: str
    last_applied_at: str
    peer_sessions: _containers.RepeatedCompositeFieldContainer[PeerSession]
    tables: _containers.RepeatedCompositeFieldContainer[TableEntries]
    observed_at: str
    sequence: int
    partial: bool
    removed_tables: _containers.RepeatedScalarFieldContainer[str]
    peers_changed: bool
    def __init__(self, haproxy_version: _Optional[str] = ..., last_applied_by: _Optional[str] = ..., last_applied_at: _Optional[str] = ..., peer_sessions: _Optional[_Iterable[_Union[PeerSession, _Mapping]]] = ..., tables: _Optional[_Iterable[_Union[TableEntries, _Mapping]]] = ..., observed_at: _Optional[str] = ..., sequence: _Optional[int] = ..., partial: _Optional[bool] = ..., removed_tables: _Optional[_Iterable[str]] = ..., peers_changed: _Optional[bool] = ...) -> None: ...

class PeerSession(_message.Message):
    __slots__ = ("name", "state", "connected")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    connected: bool
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., connected: _Optional[bool] = ...) -> None: ...

class TableEntries(_message.Message):
    __slots__ = ("table", "entries")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    table: str
    entries: int
    def __init__(self, table: _Optional[str] = ..., entries: _Optional[int] = ...) -> None: ...

class ServerMessage(_message.Message):
    __slots__ = ("nonce", "snapshot", "in_sync", "waiting", "delta", "report_terms")
    NONCE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    REPORT_TERMS_FIELD_NUMBER: _ClassVar[int]
    nonce: str
    snapshot: Snapshot
    in_sync: InSync
    waiting: Waiting
    delta: SnapshotDelta
    report_terms: ReportTerms
    def __init__(self, nonce: _Optional[str] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ..., in_sync: _Optional[_Union[InSync, _Mapping]] = ..., waiting: _Optional[_Union[Waiting, _Mapping]] = ..., delta: _Optional[_Union[SnapshotDelta, _Mapping]] = ..., report_terms: _Optional[_Union[ReportTerms, _Mapping]] = ...) -> None: ...

class ReportTerms(_message.Message):
    __slots__ = ("max_tables",)
    MAX_TABLES_FIELD_NUMBER: _ClassVar[int]
    max_tables: int
    def __init__(self, max_tables: _Optional[int] = ...) -> None: ...

class SnapshotDelta(_message.Message):
    __slots__ = ("workload", "version", "to_content_hash", "peers", "backends", "http_frontend", "tcp_frontends", "warnings", "from_content_hash", "removed_backends", "peers_changed", "frontends_changed", "warnings_changed", "http_listeners", "certificates", "tls_listeners", "removed_certificates", "route_groups", "removed_route_groups")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    HTTP_FRONTEND_FIELD_NUMBER: _ClassVar[int]
    TCP_FRONTENDS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    FROM_CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    REMOVED_BACKENDS_FIELD_NUMBER: _ClassVar[int]
    PEERS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    FRONTENDS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    HTTP_LISTENERS_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    TLS_LISTENERS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_CERTIFICATES_FIELD_NUMBER: _ClassVar[int]
    ROUTE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    REMOVED_ROUTE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    workload: str
    version: int
    to_content_hash: str
    peers: PeerSection
    backends: _containers.RepeatedCompositeFieldContainer[Backend]
    http_frontend: HttpFrontend
    tcp_frontends: _containers.RepeatedCompositeFieldContainer[TcpFrontend]
    warnings: _containers.RepeatedCompositeFieldContainer[RejectedInput]
    from_content_hash: str
    removed_backends: _containers.RepeatedScalarFieldContainer[str]
    peers_changed: bool
    frontends_changed: bool
    warnings_changed: bool
    http_listeners: _containers.RepeatedCompositeFieldContainer[HttpListener]
    certificates: _containers.RepeatedCompositeFieldContainer[Certificate]
    tls_listeners: _containers.RepeatedCompositeFieldContainer[TlsPassthroughListener]
    removed_certificates: _containers.RepeatedScalarFieldContainer[str]
    route_groups: _containers.RepeatedCompositeFieldContainer[RouteGroup]
    removed_route_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workload: _Optional[str] = ..., version: _Optional[int] = ..., to_content_hash: _Optional[str] = ..., peers: _Optional[_Union[PeerSection, _Mapping]] = ..., backends: _Optional[_Iterable[_Union[Backend, _Mapping]]] = ..., http_frontend: _Optional[_Union[HttpFrontend, _Mapping]] = ..., tcp_frontends: _Optional[_Iterable[_Union[TcpFrontend, _Mapping]]] = ..., warnings: _Optional[_Iterable[_Union[RejectedInput, _Mapping]]] = ..., from_content_hash: _Optional[str] = ..., removed_backends: _Optional[_Iterable[str]] = ..., peers_changed: _Optional[bool] = ..., frontends_changed: _Optional[bool] = ..., warnings_changed: _Optional[bool] = ..., http_listeners: _Optional[_Iterable[_Union[HttpListener, _Mapping]]] = ..., certificates: _Optional[_Iterable[_Union[Certificate, _Mapping]]] = ..., tls_listeners: _Optional[_Iterable[_Union[TlsPassthroughListener, _Mapping]]] = ..., removed_certificates: _Optional[_Iterable[str]] = ..., route_groups: _Optional[_Iterable[_Union[RouteGroup, _Mapping]]] = ..., removed_route_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class InSync(_message.Message):
    __slots__ = ("version", "content_hash")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    version: int
    content_hash: str
    def __init__(self, version: _Optional[int] = ..., content_hash: _Optional[str] = ...) -> None: ...

class Waiting(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class ListWorkloadsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkloadsResponse(_message.Message):
    __slots__ = ("workloads", "replica")
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[WorkloadSummary]
    replica: ReplicaStatus
    def __init__(self, workloads: _Optional[_Iterable[_Union[WorkloadSummary, _Mapping]]] = ..., replica: _Optional[_Union[ReplicaStatus, _Mapping]] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("name", "role", "leader", "ready", "not_ready_reason", "ledger_version", "endpoints_waiting", "ledger_problems")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASON_FIELD_NUMBER: _ClassVar[int]
    LEDGER_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_WAITING_FIELD_NUMBER: _ClassVar[int]
    LEDGER_PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    leader: str
    ready: bool
    not_ready_reason: str
    ledger_version: str
    endpoints_waiting: int
    ledger_problems: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., ready: _Optional[bool] = ..., not_ready_reason: _Optional[str] = ..., ledger_version: _Optional[str] = ..., endpoints_waiting: _Optional[int] = ..., ledger_problems: _Optional[_Iterable[str]] = ...) -> None: ...

class WorkloadSummary(_message.Message):
    __slots__ = ("workload", "version", "content_hash", "peers", "backends", "warnings", "agents_in_sync", "agents_connected", "endpoints_waiting")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    AGENTS_IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    AGENTS_CONNECTED_FIELD_NUMBER: _ClassVar[int]
    ENDPOINTS_WAITING_FIELD_NUMBER: _ClassVar[int]
    workload: str
    version: int
    content_hash: str
    peers: int
    backends: int
    warnings: int
    agents_in_sync: int
    agents_connected: int
    endpoints_waiting: int
    def __init__(self, workload: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., peers: _Optional[int] = ..., backends: _Optional[int] = ..., warnings: _Optional[int] = ..., agents_in_sync: _Optional[int] = ..., agents_connected: _Optional[int] = ..., endpoints_waiting: _Optional[int] = ...) -> None: ...

class GetSnapshotRequest(_message.Message):
    __slots__ = ("workload", "version")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    workload: str
    version: int
    def __init__(self, workload: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: str
    def __init__(self, workload: _Optional[str] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents",)
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentStatus]
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentStatus, _Mapping]]] = ...) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("agent", "node_name", "workload", "peer_address", "acked_version", "acked_content_hash", "pending_version", "last_nack_error", "last_nack_version", "connected_since", "agent_version", "deltas", "pending_since", "acked_at", "haproxy_version", "applied_by", "report", "current_version", "set_aside", "set_aside_count")
    AGENT_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    PEER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACKED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACKED_CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    PENDING_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_NACK_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_NACK_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_SINCE_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    PENDING_SINCE_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_FIELD_NUMBER: _ClassVar[int]
    HAPROXY_VERSION_FIELD_NUMBER: _ClassVar[int]
    APPLIED_BY_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_FIELD_NUMBER: _ClassVar[int]
    SET_ASIDE_COUNT_FIELD_NUMBER: _ClassVar[int]
    agent: str
    node_name: str
    workload: str
    peer_address: str
    acked_version: int
    acked_content_hash: str
    pending_version: int
    last_nack_error: str
    last_nack_version: int
    connected_since: str
    agent_version: str
    deltas: bool
    pending_since: str
    acked_at: str
    haproxy_version: str
    applied_by: str
    report: AgentReport
    current_version: int
    set_aside: _containers.RepeatedCompositeFieldContainer[SetAsidePart]
    set_aside_count: int
    def __init__(self, agent: _Optional[str] = ..., node_name: _Optional[str] = ..., workload: _Optional[str] = ..., peer_address: _Optional[str] = ..., acked_version: _Optional[int] = ..., acked_content_hash: _Optional[str] = ..., pending_version: _Optional[int] = ..., last_nack_error: _Optional[str] = ..., last_nack_version: _Optional[int] = ..., connected_since: _Optional[str] = ..., agent_version: _Optional[str] = ..., deltas: _Optional[bool] = ..., pending_since: _Optional[str] = ..., acked_at: _Optional[str] = ..., haproxy_version: _Optional[str] = ..., applied_by: _Optional[str] = ..., report: _Optional[_Union[AgentReport, _Mapping]] = ..., current_version: _Optional[int] = ..., set_aside: _Optional[_Iterable[_Union[SetAsidePart, _Mapping]]] = ..., set_aside_count: _Optional[int] = ...) -> None: ...
