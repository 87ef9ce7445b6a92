"""Settings resolved for a Service or a workload: Service annotation, then ConfigMap, then
default, over the rows of `table.py`. Source-IP persistence of a Service port may also come
from a SourceIPPersistencePolicy (`policies.py`): annotation, then policy, then ConfigMap,
then default.

A key is read as `haproxy.org/<name>` or bare `<name>`; when both are present the prefixed
one wins and the bare one is ignored. A value that fails its parser is rejected: the next
level's value is used and a `RejectedInput` says what and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from controlplane.model import ANNOTATION_PREFIX, ConfigMap, LabelSelector, Service
from controlplane.settings.policies import EMPTY_TABLE, PersistenceOverride, PolicyTable
from controlplane.settings.table import (
    ACCEPT_PROXY,
    BY_KEY,
    CHECK,
    CHECK_FALL,
    CHECK_HTTP,
    CHECK_INTERVAL,
    CHECK_RISE,
    DEFAULT_CERTIFICATE,
    EXPIRE,
    GATEWAY_ADDRESS_POOL,
    GATEWAY_NAMESPACES,
    HASH_TYPE,
    HTTP_PORT,
    HTTPS_PORT,
    LOAD_BALANCE,
    PEER_PORT,
    PERSISTENCE,
    PUBLISH_SERVICE,
    SERVER_SLOTS,
    SPARE_BACKENDS,
    TABLE_SIZE,
    Setting,
    T,
)
from controlplane.settings.values import AddressPool, Balance, Invalid, shown
from controlplane.snapshot import RejectedInput
from peerplane import healthcheck


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


# id(ConfigMap) -> (that ConfigMap, its GlobalSettings, their rejections): the last one.
_GLOBAL: dict[int, tuple[ConfigMap | None, GlobalSettings, tuple[RejectedInput, ...]]] = {}


class Resolver:
    """Resolves settings for Services against one settings ConfigMap and the policies'
    table (`policies.resolve_policies`; none by default)."""

    def __init__(self, settings: ConfigMap | None, policies: PolicyTable = EMPTY_TABLE) -> None:
        self._configmap = settings
        self.policies = policies

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
        self, service: Service, mode: str, rejections: list[RejectedInput], port: str = ""
    ) -> BackendSettings:
        """Backend-wide settings of `service`'s backend of port `port` (its name, "" when
        unnamed) in `mode` ("http" or "tcp")."""
        override = self.policies.of(service.namespace, service.name).get(port)
        if override is None:
            persistence = self._resolve(service, PERSISTENCE, mode, rejections)
            table_size = self._resolve(service, TABLE_SIZE, mode, rejections)
            expire_ms = self._resolve(service, EXPIRE, mode, rejections)
        else:
            persistence, table_size, expire_ms = self._policy(override, mode, rejections)
        return BackendSettings(
            balance=self._resolve(service, LOAD_BALANCE, mode, rejections),
            hash_type=self._resolve(service, HASH_TYPE, mode, rejections),
            persistence=persistence,
            table_size=table_size,
            expire_ms=expire_ms,
            server_slots=self._resolve(service, SERVER_SLOTS, mode, rejections),
            check=self._check(service, mode, rejections),
        )

    def _policy(
        self, override: PersistenceOverride, mode: str, rejections: list[RejectedInput]
    ) -> tuple[bool, int, int]:
        """A policy's persistence (the table holds one only where the Service has no
        persistence annotation): on, its values, else the ConfigMap's, else the default."""
        table_size = override.table_size
        if table_size is None:
            table_size = self._configmap_value(TABLE_SIZE, mode, rejections)
        expire_ms = override.expire_ms
        if expire_ms is None:
            expire_ms = self._configmap_value(EXPIRE, mode, rejections)
        return True, table_size, expire_ms

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
        not from Gateways take the PROXY protocol. A function of the ConfigMap alone,
        computed once per ConfigMap object (every computation asks, twice: parsing and
        checking every value cost ~2.5 ms of a route change), its rejections replayed."""
        cached = _GLOBAL.get(id(self._configmap))
        if cached is not None and cached[0] is self._configmap:
            rejections.extend(cached[2])
            return cached[1]
        found: list[RejectedInput] = []
        made = self._global_settings(found)
        _GLOBAL.clear()  # one ConfigMap at a time: the settings in use
        _GLOBAL[id(self._configmap)] = (self._configmap, made, tuple(found))
        rejections.extend(found)
        return made

    def _global_settings(self, rejections: list[RejectedInput]) -> GlobalSettings:

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
        self.spare_backends(rejections)  # read by the spare pool; reported here
        return GlobalSettings(
            http_port=http,
            peer_port=peer,
            https_port=https,
            accept_proxy=accept_proxy,
            default_certificate=self.default_certificate(rejections),
        )

    def spare_backends(self, rejections: list[RejectedInput] | None = None) -> int:
        """How many spare backends every haproxy.cfg declares (0: none)."""
        found = [] if rejections is None else rejections
        return self._configmap_value(SPARE_BACKENDS, "http", found)

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
