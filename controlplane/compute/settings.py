"""Settings resolution: Service annotation, then settings ConfigMap, then default.

A key is read as `haproxy.org/<name>` or bare `<name>`; when both are present the prefixed
one wins and the bare one is ignored. A value that fails its parser is rejected: the next
level's value is used and a `Rejection` says what and why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from controlplane.compute.types import Rejection
from controlplane.compute.values import (
    MAX_SERVER_SLOTS,
    Balance,
    Invalid,
    parse_balance,
    parse_bool,
    parse_check_count,
    parse_check_interval,
    parse_check_path,
    parse_hash_type,
    parse_port,
    parse_positive_int,
    parse_size,
    parse_time_ms,
    shown,
)
from controlplane.model import ANNOTATION_PREFIX, ConfigMap, Service
from peerplane import healthcheck

T = TypeVar("T")

DEFAULT_BALANCE = Balance("roundrobin")
DEFAULT_HASH_TYPE = ""
DEFAULT_PERSISTENCE = False
DEFAULT_TABLE_SIZE = 1024 * 1024  # "1m"
DEFAULT_EXPIRE_MS = 30 * 60 * 1000  # "30m"
DEFAULT_SERVER_SLOTS = 42
DEFAULT_HTTP_PORT = 80
DEFAULT_PEER_PORT = 10000
DEFAULT_CHECK = True  # as in the haproxytech ingress controller: pods can die unannounced


@dataclass(frozen=True, slots=True)
class Lookup:
    key: str  # the key as written (prefixed or bare)
    value: str


def lookup(data: Mapping[str, str], name: str) -> Lookup | None:
    """`haproxy.org/<name>` if present, else bare `<name>`, else None."""
    prefixed = ANNOTATION_PREFIX + name
    if prefixed in data:
        return Lookup(prefixed, data[prefixed])
    if name in data:
        return Lookup(name, data[name])
    return None


def rejection(kind: str, namespace: str, name: str, found: Lookup, reason: str) -> Rejection:
    return Rejection(kind, namespace, name, found.key, shown(found.value), reason)


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """Server health checks: `inter`, `rise`, `fall`, and an HTTP path ("" = TCP connect)."""

    interval_ms: int = healthcheck.DEFAULT_INTERVAL_MS
    rise: int = healthcheck.DEFAULT_RISE
    fall: int = healthcheck.DEFAULT_FALL
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


class Resolver:
    """Resolves settings for Services against one settings ConfigMap."""

    def __init__(self, settings: ConfigMap | None) -> None:
        self._configmap = settings

    def _resolve(
        self,
        service: Service,
        name: str,
        parse: Callable[[str], T],
        default: T,
        rejections: list[Rejection],
    ) -> T:
        found = lookup(service.annotations, name)
        if found is not None:
            try:
                return parse(found.value)
            except Invalid as err:
                rejections.append(
                    rejection("Service", service.namespace, service.name, found, str(err))
                )
        return self._configmap_value(name, parse, default, rejections)

    def _configmap_value(
        self, name: str, parse: Callable[[str], T], default: T, rejections: list[Rejection]
    ) -> T:
        cm = self._configmap
        found = lookup(cm.data, name) if cm is not None else None
        if cm is None or found is None:
            return default
        try:
            return parse(found.value)
        except Invalid as err:
            rejections.append(rejection("ConfigMap", cm.namespace, cm.name, found, str(err)))
            return default

    def backend(self, service: Service, mode: str, rejections: list[Rejection]) -> BackendSettings:
        """Backend-wide settings of `service`'s backends in `mode` ("http" or "tcp")."""
        return BackendSettings(
            balance=self._resolve(
                service,
                "load-balance",
                lambda text: parse_balance(text, mode),
                DEFAULT_BALANCE,
                rejections,
            ),
            hash_type=self._resolve(
                service, "hash-type", parse_hash_type, DEFAULT_HASH_TYPE, rejections
            ),
            persistence=self._resolve(
                service, "source-ip-persistence", parse_bool, DEFAULT_PERSISTENCE, rejections
            ),
            table_size=self._resolve(
                service, "source-ip-persistence-size", parse_size, DEFAULT_TABLE_SIZE, rejections
            ),
            expire_ms=self._resolve(
                service,
                "source-ip-persistence-expire",
                parse_time_ms,
                DEFAULT_EXPIRE_MS,
                rejections,
            ),
            server_slots=self._resolve(
                service,
                "server-slots",
                lambda text: parse_positive_int(text, MAX_SERVER_SLOTS),
                DEFAULT_SERVER_SLOTS,
                rejections,
            ),
            check=self._check(service, mode, rejections),
        )

    def _check(
        self, service: Service, mode: str, rejections: list[Rejection]
    ) -> CheckSettings | None:
        """Every check key is resolved (and a bad one reported) even when checks are off.

        `check-http` applies to HTTP backends: on a TCP Service's own annotation it is
        rejected; a ConfigMap value is a fleet default and simply does not apply to TCP.
        """
        enabled = self._resolve(service, "check", parse_bool, DEFAULT_CHECK, rejections)
        settings = CheckSettings(
            interval_ms=self._resolve(
                service,
                "check-interval",
                parse_check_interval,
                healthcheck.DEFAULT_INTERVAL_MS,
                rejections,
            ),
            rise=self._resolve(
                service, "check-rise", parse_check_count, healthcheck.DEFAULT_RISE, rejections
            ),
            fall=self._resolve(
                service, "check-fall", parse_check_count, healthcheck.DEFAULT_FALL, rejections
            ),
            http_path=self._resolve(service, "check-http", parse_check_path, "", rejections),
        )
        if mode != "http" and settings.http_path:
            found = lookup(service.annotations, "check-http")
            if found is not None and healthcheck.is_path(found.value.strip()):
                reason = f"check-http needs an HTTP backend, this one is {mode}"
                rejections.append(
                    rejection("Service", service.namespace, service.name, found, reason)
                )
            settings = replace(settings, http_path="")
        return settings if enabled else None

    def global_settings(self, rejections: list[Rejection]) -> GlobalSettings:
        """The HTTP frontend port and the peer port; they may never collide."""

        def peer_port(text: str) -> int:
            port = parse_port(text)
            if port == DEFAULT_HTTP_PORT:
                raise Invalid(f"port {port} is the default HTTP port")
            return port

        peer = self._configmap_value("peer-port", peer_port, DEFAULT_PEER_PORT, rejections)

        def http_port(text: str) -> int:
            port = parse_port(text)
            if port == peer:
                raise Invalid(f"port {port} is the peer port")
            return port

        http = self._configmap_value("http-port", http_port, DEFAULT_HTTP_PORT, rejections)
        return GlobalSettings(http_port=http, peer_port=peer)
