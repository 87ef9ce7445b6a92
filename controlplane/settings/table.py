"""The settings table: every key, its parser, default, scope and doc (resolution:
`resolver.py`: Service annotation, then ConfigMap, then default).

Every setting is one `Setting` row of `SETTINGS`: key, parser, default, scope and a
one-line doc. The resolver reads the rows, `lookup` refuses a key that is not a row, and
a test checks docs/annotations.md and deploy/base/settings.yaml against the table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from controlplane.model import LabelSelector
from controlplane.settings.values import (
    MAX_SERVER_SLOTS,
    AddressPool,
    Balance,
    Hosts,
    parse_address_pool,
    parse_balance,
    parse_bool,
    parse_check_count,
    parse_check_interval,
    parse_check_path,
    parse_count,
    parse_hash_type,
    parse_hosts,
    parse_label_selector,
    parse_port,
    parse_positive_int,
    parse_secret_ref,
    parse_size,
    parse_time_ms,
    parse_workload_refs,
)
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

MAX_SPARE_BACKENDS = 64
SPARE_BACKENDS = Setting(
    "spare-backends", _any_mode(lambda text: parse_count(text, MAX_SPARE_BACKENDS)), 0,
    "ConfigMap", "`0`",
    "Spare backends declared in every haproxy.cfg, with the settings a Service gets by "
    "default: a new Service whose settings they fit claims one and is routed to without a "
    "reload; the pool is refilled at the next reload. `0`: off (docs/operations.md, "
    "\"Spare backends\").",
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
    SPARE_BACKENDS,
)
BY_KEY: Mapping[str, Setting[Any]] = {row.key: row for row in SETTINGS}
