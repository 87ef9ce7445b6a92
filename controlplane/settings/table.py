"""The settings table, and their resolution: Service annotation, then ConfigMap, then default.

Every setting is one `Setting` row of `SETTINGS`: key, parser, default, scope and a
one-line doc. The resolver reads the rows, `lookup` refuses a key that is not a row, and
a test checks docs/annotations.md and deploy/base/settings.yaml against the table.

A key is read as `haproxy.org/<name>` or bare `<name>`; when both are present the prefixed
one wins and the bare one is ignored. A value that fails its parser is rejected: the next
level's value is used and a `RejectedInput` says what and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Literal, TypeVar

from controlplane.model import ANNOTATION_PREFIX, ConfigMap, LabelSelector, Service
from controlplane.settings.values import (
    MAX_SERVER_SLOTS,
    AddressPool,
    Balance,
    Hosts,
    Invalid,
    parse_address_pool,
    parse_balance,
    parse_bool,
    parse_check_count,
    parse_check_interval,
    parse_check_path,
    parse_hash_type,
    parse_hosts,
    parse_label_selector,
    parse_port,
    parse_positive_int,
    parse_secret_ref,
    parse_size,
    parse_time_ms,
    parse_workload_refs,
    shown,
)
from controlplane.snapshot import RejectedInput
from peerplane import healthcheck

T = TypeVar("T")

# Where a key is read: a Service's annotations, the settings ConfigMap, or both (the
# annotation overrides the ConfigMap).
Scope = Literal["Service", "ConfigMap", "both"]


@dataclass(frozen=True, slots=True)
class Setting(Generic[T]):
    """One row of the settings table."""

    key: str  # without the `haproxy.org/` prefix
    parse: Callable[[str, str], T]  # (text, backend mode "http"/"tcp") -> value, or Invalid
    default: T  # when no level gives a valid value (None / "": unset)
    scope: Scope
    default_doc: str  # the default as docs/annotations.md writes it
    doc: str  # one line; the docs' "Meaning" starts with it

    @property
    def on_service(self) -> bool:
        return self.scope != "ConfigMap"

    @property
    def in_configmap(self) -> bool:
        return self.scope != "Service"


def _any_mode(parse: Callable[[str], T]) -> Callable[[str, str], T]:
    """A parser whose answer does not depend on the backend mode."""
    return lambda text, _mode: parse(text)


# The table. Each row: key, parser, default, scope, the default as documented, doc.
EXPOSE = Setting(
    "expose", _any_mode(parse_bool), False, "Service", "`false`",
    "Opt-in: only Services with `true` are served.",
)  # fmt: skip
WORKLOADS: Setting[frozenset[str] | None] = Setting(
    "workloads", _any_mode(parse_workload_refs), None, "Service", "every workload",
    "Limits the Service to these HAProxy workloads (the DaemonSet/Deployment/StatefulSet name).",
)  # fmt: skip
HOSTS: Setting[Hosts | None] = Setting(
    "hosts", _any_mode(parse_hosts), None, "Service", "none",
    "Routes these hosts (Host header, port stripped, case-insensitive) from the HTTP frontend "
    "to the backend of the Service's first port.",
)  # fmt: skip
TCP_PORT: Setting[int | None] = Setting(
    "tcp-port", _any_mode(parse_port), None, "Service", "none",
    "A TCP frontend on this port for the Service's first port; the Service's backends are "
    "`mode tcp`.",
)  # fmt: skip
LOAD_BALANCE = Setting(
    "load-balance", parse_balance, Balance("roundrobin"), "both", "`roundrobin`",
    "Balance algorithm.",
)  # fmt: skip
HASH_TYPE = Setting(
    "hash-type", _any_mode(parse_hash_type), "", "both", "HAProxy's (`map-based`)",
    "Hash type for hashing algorithms (`source`, `uri`, `url_param`, `hdr`).",
)  # fmt: skip
PERSISTENCE = Setting(
    "source-ip-persistence", _any_mode(parse_bool), False, "both", "`false`",
    "`stick on src` with a stick table replicated through the `localinstance` peers.",
)  # fmt: skip
TABLE_SIZE = Setting(
    "source-ip-persistence-size", _any_mode(parse_size), 1024 * 1024, "both", "`1m`",
    "Stick-table size, at most 1g entries.",
)  # fmt: skip
EXPIRE = Setting(
    "source-ip-persistence-expire", _any_mode(parse_time_ms), 30 * 60 * 1000, "both", "`30m`",
    "Entry expiry, rendered in ms; at most 2^31-1 ms.",
)  # fmt: skip
SERVER_SLOTS = Setting(
    "server-slots", _any_mode(lambda text: parse_positive_int(text, MAX_SERVER_SLOTS)), 42,
    "both", "`42`",
    "Minimum slots per backend; the slot count grows in steps of this value (up to 10,000 "
    "slots) and never shrinks while the backend exists.",
)  # fmt: skip
# On by default, as in the haproxytech ingress controller: pods can die unannounced.
CHECK = Setting(
    "check", _any_mode(parse_bool), True, "both", "`true`",
    "Active health checks on every server of the backend (`check` on each server line), so "
    "a pod that dies without its endpoint being removed is taken out after `check-interval` "
    "\u00d7 `check-fall`.",
)  # fmt: skip
CHECK_INTERVAL = Setting(
    "check-interval", _any_mode(parse_check_interval), healthcheck.DEFAULT_INTERVAL_MS,
    "both", "`2s`",
    "Time between two checks of a server (`inter`, rendered in ms).",
)  # fmt: skip
CHECK_RISE = Setting(
    "check-rise", _any_mode(parse_check_count), healthcheck.DEFAULT_RISE, "both", "`2`",
    "Consecutive successful checks that bring a down server back (`rise`).",
)  # fmt: skip
CHECK_FALL = Setting(
    "check-fall", _any_mode(parse_check_count), healthcheck.DEFAULT_FALL, "both", "`3`",
    "Consecutive failed checks that take an up server out (`fall`).",
)  # fmt: skip
CHECK_HTTP = Setting(
    "check-http", _any_mode(parse_check_path), "", "both", "none (TCP connect check)",
    "HTTP backends only: the check is `GET <path>` and passes on a 2xx or 3xx status "
    "(`option httpchk GET <path>`, `http-check expect status 200-399`).",
)  # fmt: skip
HTTP_PORT = Setting(
    "http-port", _any_mode(parse_port), 80, "ConfigMap", "`80`",
    "Port of the HTTP frontend.",
)  # fmt: skip
HTTPS_PORT = Setting(
    "https-port", _any_mode(parse_port), 443, "ConfigMap", "`443`",
    "Port where an Ingress with `spec.tls` is served in HTTPS (its rules are served on "
    "`http-port` too).",
)  # fmt: skip
ACCEPT_PROXY = Setting(
    "accept-proxy-protocol", _any_mode(parse_bool), False, "ConfigMap", "`false`",
    "Ports not from a Gateway (`http-port`, `https-port`, `haproxy.org/tcp-port`) take the "
    "PROXY protocol (v1 or v2) from the load balancer in front, which keeps the client's "
    "address.",
)  # fmt: skip
DEFAULT_CERTIFICATE = Setting(
    "default-certificate", _any_mode(parse_secret_ref), "", "ConfigMap",
    "none (`strict-sni`)",
    "`namespace/name` of the kubernetes.io/tls Secret every HTTPS port presents to a client "
    "whose SNI matches no listener's name or who sends none; unset (or unusable, reported): "
    "no default, such a handshake fails, so no tenant's certificate becomes the default.",
)  # fmt: skip
GATEWAY_NAMESPACES: Setting[LabelSelector | None] = Setting(
    "gateway-namespaces", _any_mode(parse_label_selector), None, "ConfigMap",
    "every namespace",
    "Label selector (`kubectl -l` syntax: `key=value`, `key!=value`, `key in (a,b)`, "
    "`key notin (a,b)`, `key`, `!key`, comma-separated) of the namespaces whose Gateways of "
    "peerplane's GatewayClasses are accepted; a Gateway elsewhere is `Accepted: False` "
    "(`NamespaceNotAllowed`) and serves nothing. An invalid value accepts no Gateway.",
)  # fmt: skip
PUBLISH_SERVICE: Setting[frozenset[str] | None] = Setting(
    "publish-service", _any_mode(parse_workload_refs), None, "ConfigMap",
    "none (the pods' addresses)",
    "Comma-separated `namespace/name` of the Services in front of the HAProxy workloads "
    "(a `type: LoadBalancer` Service): a workload whose pods a listed Service selects "
    "publishes that Service's `status.loadBalancer.ingress` as the address of its Gateways "
    "and Ingresses; any other workload publishes its pods' addresses.",
)  # fmt: skip
GATEWAY_ADDRESS_POOL: Setting[AddressPool | None] = Setting(
    "gateway-address-pool", _any_mode(parse_address_pool), None, "ConfigMap",
    "none (every Gateway on its workload's addresses)",
    "Comma-separated IP addresses, `first-last` ranges and CIDRs from which each Gateway "
    "of peerplane's classes gets an address of its own, kept for its life: its HTTP and "
    "HTTPS listeners bind that address only, so Gateways never share a frontend. A "
    "Gateway's `spec.addresses` of type IPAddress in the pool is honoured. The addresses "
    "must reach the HAProxy nodes (docs/operations.md, \"Gateway addresses\").",
)  # fmt: skip
PEER_PORT = Setting(
    "peer-port", _any_mode(parse_port), 10000, "ConfigMap", "`10000`",
    "Port of the `peers localinstance` section on every HAProxy pod.",
)  # fmt: skip

SETTINGS: tuple[Setting[Any], ...] = (
    EXPOSE,
    WORKLOADS,
    HOSTS,
    TCP_PORT,
    LOAD_BALANCE,
    HASH_TYPE,
    PERSISTENCE,
    TABLE_SIZE,
    EXPIRE,
    SERVER_SLOTS,
    CHECK,
    CHECK_INTERVAL,
    CHECK_RISE,
    CHECK_FALL,
    CHECK_HTTP,
    HTTP_PORT,
    HTTPS_PORT,
    ACCEPT_PROXY,
    DEFAULT_CERTIFICATE,
    GATEWAY_NAMESPACES,
    PUBLISH_SERVICE,
    GATEWAY_ADDRESS_POOL,
    PEER_PORT,
)
BY_KEY: Mapping[str, Setting[Any]] = {row.key: row for row in SETTINGS}


@dataclass(frozen=True, slots=True)
class Lookup:
    key: str  # the key as written (prefixed or bare)
    value: str


def lookup(data: Mapping[str, str], name: str) -> Lookup | None:
    """`haproxy.org/<name>` if present, else bare `<name>`, else None.

    KeyError for a name that is not a row of `SETTINGS`: every key read is in the table.
    """
    if name not in BY_KEY:
        raise KeyError(f"setting {name!r} is not in the settings table (SETTINGS)")
    prefixed = ANNOTATION_PREFIX + name
    if prefixed in data:
        return Lookup(prefixed, data[prefixed])
    if name in data:
        return Lookup(name, data[name])
    return None


def rejection(kind: str, namespace: str, name: str, found: Lookup, reason: str) -> RejectedInput:
    return RejectedInput(kind, namespace, name, found.key, shown(found.value), reason)


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """Server health checks: `inter`, `rise`, `fall`, and an HTTP path ("" = TCP connect)."""

    interval_ms: int = CHECK_INTERVAL.default
    rise: int = CHECK_RISE.default
    fall: int = CHECK_FALL.default
    http_path: str = ""


@dataclass(frozen=True, slots=True)
class BackendSettings:
    balance: Balance
    hash_type: str
    persistence: bool
    table_size: int
    expire_ms: int
    server_slots: int
    check: CheckSettings | None = CheckSettings()  # None: health checks off


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    """Workload-wide settings that only the ConfigMap sets."""

    http_port: int
    peer_port: int
    https_port: int = HTTPS_PORT.default  # 0: none (the default collided)
    accept_proxy: bool = ACCEPT_PROXY.default  # on the ports not from Gateways
    default_certificate: str = ""  # "namespace/name" of its Secret; "": none (strict SNI)


@dataclass(frozen=True, slots=True)
class GatewayNamespaces:
    """The settings' `gateway-namespaces`: the selector (None: every namespace, unless
    `invalid`, then none), its text as written."""

    selector: LabelSelector | None
    text: str = ""
    invalid: str = ""  # why the value is not a label selector


class Resolver:
    """Resolves settings for Services against one settings ConfigMap."""

    def __init__(self, settings: ConfigMap | None) -> None:
        self._configmap = settings

    def _resolve(
        self, service: Service, row: Setting[T], mode: str, rejections: list[RejectedInput]
    ) -> T:
        """The Service's value of `row`, else the ConfigMap's, else the default."""
        found = lookup(service.annotations, row.key)
        if found is not None:
            try:
                return row.parse(found.value, mode)
            except Invalid as err:
                rejections.append(
                    rejection("Service", service.namespace, service.name, found, str(err))
                )
        return self._configmap_value(row, mode, rejections)

    def retired_quarantine_s(self) -> float:
        """How long the slots of a backend whose Service is gone are remembered: the
        fleet's stick-table expire (the ConfigMap's, else the default). The Service's own
        annotations are gone with it, and a replica restarted since must decide the same."""
        return float(self._configmap_value(EXPIRE, "http", [])) / 1000

    def _configmap_value(
        self,
        row: Setting[T],
        mode: str,
        rejections: list[RejectedInput],
        check: Callable[[T], None] | None = None,
    ) -> T:
        """The ConfigMap's value of `row` (`check` may refuse a parsed value), else the
        default."""
        cm = self._configmap
        found = lookup(cm.data, row.key) if cm is not None else None
        if cm is None or found is None:
            return row.default
        try:
            value = row.parse(found.value, mode)
            if check is not None:
                check(value)
            return value
        except Invalid as err:
            rejections.append(rejection("ConfigMap", cm.namespace, cm.name, found, str(err)))
            return row.default

    def backend(
        self, service: Service, mode: str, rejections: list[RejectedInput]
    ) -> BackendSettings:
        """Backend-wide settings of `service`'s backends in `mode` ("http" or "tcp")."""
        return BackendSettings(
            balance=self._resolve(service, LOAD_BALANCE, mode, rejections),
            hash_type=self._resolve(service, HASH_TYPE, mode, rejections),
            persistence=self._resolve(service, PERSISTENCE, mode, rejections),
            table_size=self._resolve(service, TABLE_SIZE, mode, rejections),
            expire_ms=self._resolve(service, EXPIRE, mode, rejections),
            server_slots=self._resolve(service, SERVER_SLOTS, mode, rejections),
            check=self._check(service, mode, rejections),
        )

    def _check(
        self, service: Service, mode: str, rejections: list[RejectedInput]
    ) -> CheckSettings | None:
        """Every check key is resolved (and a bad one reported) even when checks are off.

        `check-http` applies to HTTP backends: on a TCP Service's own annotation it is
        rejected; a ConfigMap value is a fleet default and simply does not apply to TCP.
        """
        enabled = self._resolve(service, CHECK, mode, rejections)
        settings = CheckSettings(
            interval_ms=self._resolve(service, CHECK_INTERVAL, mode, rejections),
            rise=self._resolve(service, CHECK_RISE, mode, rejections),
            fall=self._resolve(service, CHECK_FALL, mode, rejections),
            http_path=self._resolve(service, CHECK_HTTP, mode, rejections),
        )
        if mode != "http" and settings.http_path:
            found = lookup(service.annotations, CHECK_HTTP.key)
            if found is not None and healthcheck.is_path(found.value.strip()):
                reason = f"check-http needs an HTTP backend, this one is {mode}"
                rejections.append(
                    rejection("Service", service.namespace, service.name, found, reason)
                )
            settings = replace(settings, http_path="")
        return settings if enabled else None

    def gateway_namespaces(
        self, rejections: list[RejectedInput] | None = None
    ) -> GatewayNamespaces:
        """Which namespaces may have Gateways of our classes accepted. An invalid value
        allows none (a restriction fails closed) and is reported in `rejections`."""
        cm = self._configmap
        found = lookup(cm.data, GATEWAY_NAMESPACES.key) if cm is not None else None
        if cm is None or found is None:
            return GatewayNamespaces(None)
        try:
            return GatewayNamespaces(GATEWAY_NAMESPACES.parse(found.value, "http"), found.value)
        except Invalid as err:
            if rejections is not None:
                reason = f"{err}: no Gateway is accepted"
                rejections.append(rejection("ConfigMap", cm.namespace, cm.name, found, reason))
            return GatewayNamespaces(None, found.value, invalid=str(err))

    def global_settings(self, rejections: list[RejectedInput]) -> GlobalSettings:
        """The HTTP, HTTPS and peer ports (they may never collide) and whether the ports
        not from Gateways take the PROXY protocol."""

        def not_http_default(port: int) -> None:
            if port == HTTP_PORT.default:
                raise Invalid(f"port {port} is the default HTTP port")

        peer = self._configmap_value(PEER_PORT, "tcp", rejections, not_http_default)

        def not_peer(port: int) -> None:
            if port == peer:
                raise Invalid(f"port {port} is the peer port")

        http = self._configmap_value(HTTP_PORT, "http", rejections, not_peer)

        def not_peer_nor_http(port: int) -> None:
            not_peer(port)
            if port == http:
                raise Invalid(f"port {port} is the HTTP port")

        https = self._configmap_value(HTTPS_PORT, "http", rejections, not_peer_nor_http)
        if https in (peer, http):  # the default collides with a port the ConfigMap set
            https = 0  # none: an Ingress's spec.tls is reported, not served
        accept_proxy = self._configmap_value(ACCEPT_PROXY, "http", rejections)
        self.gateway_namespaces(rejections)  # read by the routes' placement; reported here
        self.publish_services(rejections)  # read by the route status; reported here
        self.gateway_address_pool(rejections)  # read by the routes' placement; reported here
        return GlobalSettings(
            http_port=http,
            peer_port=peer,
            https_port=https,
            accept_proxy=accept_proxy,
            default_certificate=self.default_certificate(rejections),
        )

    def publish_services(self, rejections: list[RejectedInput] | None = None) -> frozenset[str]:
        """The "namespace/name" of the Services whose load balancer a workload they select
        publishes (none: every workload publishes its pods' addresses)."""
        found = [] if rejections is None else rejections
        return self._configmap_value(PUBLISH_SERVICE, "http", found) or frozenset()

    def gateway_address_pool(
        self, rejections: list[RejectedInput] | None = None
    ) -> AddressPool | None:
        """The addresses Gateways get one of their own from (None: no pool, every Gateway
        is on its workload's addresses; an invalid value is reported and is no pool)."""
        found = [] if rejections is None else rejections
        return self._configmap_value(GATEWAY_ADDRESS_POOL, "http", found)

    def default_certificate(self, rejections: list[RejectedInput]) -> str:
        """The "namespace/name" of the Secret every HTTPS port presents when no SNI
        matches; "" : none (the operator chose none, or wrote no namespace/name)."""
        return self._configmap_value(DEFAULT_CERTIFICATE, "http", rejections)
