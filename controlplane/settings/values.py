"""Strict parsers for every setting a Kubernetes object can carry.

Each parser takes the raw text and returns the canonical value or raises `Invalid` with a
reason. Nothing reaches haproxy.cfg unless it matched one of these patterns.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from dataclasses import dataclass

from controlplane.model import LabelSelector, SelectorRequirement, frozen_map
from peerplane import balance as words
from peerplane import healthcheck, names
from peerplane.limits import MAX_EXPIRE_MS, MAX_TABLE_SIZE
from peerplane.runtime import untrusted


class Invalid(ValueError):
    """A value that does not match its strict pattern; the message says why."""


MAX_SERVER_SLOTS = 1000
MAX_HOSTS = 100

_SIZE = re.compile(r"([0-9]{1,12})([kmg]?)")
_TIME = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)?")
_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


@dataclass(frozen=True, slots=True)
class Balance:
    algorithm: str
    argument: str = ""


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "on", "1"):
        return True
    if lowered in ("false", "no", "off", "0"):
        return False
    raise Invalid("expected true or false")


def parse_size(text: str) -> int:
    """HAProxy size: an integer with optional k/m/g suffix, powers of 1024."""
    match = _SIZE.fullmatch(text.strip().lower())
    if not match:
        raise Invalid("expected a size: an integer with an optional k, m or g suffix")
    value = int(match[1]) * _SIZE_UNITS[match[2]]
    if value < 1:
        raise Invalid("size must be at least 1")
    if value > MAX_TABLE_SIZE:
        raise Invalid(f"size exceeds {MAX_TABLE_SIZE} entries")
    return value


def parse_time_ms(text: str) -> int:
    """HAProxy time: an integer with optional ms/s/m/h/d suffix (ms when bare)."""
    match = _TIME.fullmatch(text.strip().lower())
    if not match:
        raise Invalid("expected a duration: an integer with an optional ms, s, m, h or d suffix")
    value = int(match[1]) * _TIME_UNITS_MS[match[2] or "ms"]
    if value < 1:
        raise Invalid("duration must be positive")
    if value > MAX_EXPIRE_MS:
        raise Invalid(f"duration exceeds {MAX_EXPIRE_MS} ms")
    return value


def parse_positive_int(text: str, maximum: int) -> int:
    stripped = text.strip()
    if not stripped.isascii() or not stripped.isdigit() or len(stripped) > 9:
        raise Invalid("expected a positive integer")
    value = int(stripped)
    if not 1 <= value <= maximum:
        raise Invalid(f"expected an integer from 1 to {maximum}")
    return value


def parse_count(text: str, maximum: int) -> int:
    """An integer from 0 to `maximum` (0: off)."""
    stripped = text.strip()
    if stripped == "0":
        return 0
    try:
        return parse_positive_int(text, maximum)
    except Invalid:
        raise Invalid(f"expected an integer from 0 to {maximum}") from None


def parse_port(text: str) -> int:
    try:
        return parse_positive_int(text, 65535)
    except Invalid:
        raise Invalid("expected a TCP port from 1 to 65535") from None


def parse_balance(text: str, mode: str) -> Balance:
    """roundrobin, static-rr, leastconn, first, source, random, uri, url_param NAME, hdr(NAME)."""
    stripped = text.strip()
    balance: Balance
    if stripped in words.PLAIN_ALGORITHMS:
        balance = Balance(stripped)
    elif stripped.startswith("url_param"):
        parts = stripped.split()
        if len(parts) != 2 or parts[0] != "url_param" or not words.PARAM_NAME.fullmatch(parts[1]):
            raise Invalid("url_param needs one parameter name of letters, digits, _ . -")
        balance = Balance("url_param", parts[1])
    elif stripped.startswith("hdr(") and stripped.endswith(")"):
        name = stripped[4:-1]
        if not words.HEADER_NAME.fullmatch(name):
            raise Invalid("hdr(NAME) needs a header name of letters, digits and -")
        balance = Balance("hdr", name)
    else:
        raise Invalid(
            "unknown algorithm; expected one of roundrobin, static-rr, leastconn, first, "
            "source, random, uri, url_param NAME, hdr(NAME)"
        )
    if mode != "http" and balance.algorithm in words.HTTP_ONLY_ALGORITHMS:
        raise Invalid(f"{balance.algorithm} needs an HTTP backend, this one is {mode}")
    return balance


def parse_hash_type(text: str) -> str:
    """map-based|consistent [function] [avalanche], returned in canonical spacing."""
    try:
        return words.canonical_hash_type(text)
    except ValueError as err:
        raise Invalid(str(err)) from None


def parse_check_interval(text: str) -> int:
    """A health-check interval: an HAProxy time, from 100ms to 1h."""
    value = parse_time_ms(text)
    if not healthcheck.is_interval_ms(value):
        raise Invalid(
            f"expected {healthcheck.MIN_INTERVAL_MS}ms to {healthcheck.MAX_INTERVAL_MS // 60_000}m"
        )
    return value


def parse_check_count(text: str) -> int:
    """`rise` or `fall`: consecutive check results, 1 to 100."""
    return parse_positive_int(text, healthcheck.MAX_COUNT)


def parse_check_path(text: str) -> str:
    """An HTTP check path: `/`, URL-safe characters, an optional simple query."""
    path = text.strip()
    if not healthcheck.is_path(path):
        raise Invalid(
            "expected a path starting with /, of letters, digits, . _ ~ / -, and an optional "
            "?query of the same plus = &"
        )
    return path


@dataclass(frozen=True, slots=True)
class Hosts:
    """The hosts served (sorted) and those listed beyond `MAX_HOSTS` (as written)."""

    served: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def parse_hosts(text: str) -> Hosts:
    """Comma-separated DNS host names, lower-cased, deduplicated.

    One malformed name rejects the whole value (strict input); past `MAX_HOSTS` distinct
    names the first ones listed are kept, so a long list loses its tail, not every host.
    """
    hosts: dict[str, None] = {}  # insertion-ordered set: "first listed" is well defined
    for raw in text.split(","):
        host = raw.strip().lower()
        if not host:
            continue
        if not names.is_host_name(host):
            raise Invalid(f"{raw.strip()!r} is not a DNS host name")
        hosts[host] = None
    if not hosts:
        raise Invalid("expected at least one host name")
    listed = list(hosts)
    return Hosts(tuple(sorted(listed[:MAX_HOSTS])), tuple(listed[MAX_HOSTS:]))


def parse_workload_refs(text: str) -> frozenset[str]:
    """Comma-separated "namespace/name" workload names."""
    refs: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        namespace, sep, name = item.partition("/")
        if not sep or not is_dns_label(namespace) or not is_dns_subdomain(name):
            raise Invalid(f"{item!r} is not namespace/name")
        refs.add(item)
    if not refs:
        raise Invalid("expected at least one namespace/name")
    return frozenset(refs)


def parse_secret_ref(text: str) -> str:
    """One "namespace/name" of a Secret, as written (spaces around it dropped)."""
    item = text.strip()
    namespace, sep, name = item.partition("/")
    if not sep or not is_dns_label(namespace) or not is_dns_subdomain(name):
        raise Invalid(f"{item!r} is not namespace/name of a Secret")
    return item


# A label key: an optional DNS subdomain prefix and "/", then a name; a label value.
_LABEL_NAME = r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = re.compile(rf"([a-z0-9]([a-z0-9.-]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}")
_LABEL_VALUE = re.compile(rf"({_LABEL_NAME})?")
_REQUIREMENT = re.compile(
    r"\s*(?:(?P<not>!)\s*(?P<absent>[^\s,!=()]+)"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|!=|=)\s*(?P<value>[^\s,!=()]*)"
    r"|\s(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?)\s*(?:,|$)"
)


def parse_label_selector(text: str) -> LabelSelector:
    """A label selector as `kubectl -l` writes it: comma-separated requirements, all of
    which must hold: `key=value` (or `==`), `key!=value`, `key in (a,b)`, `key notin (a,b)`,
    `key` (present), `!key` (absent)."""
    if not text.strip():
        raise Invalid("empty label selector")
    labels: dict[str, str] = {}
    expressions: list[SelectorRequirement] = []
    at = 0
    while at < len(text):
        found = _REQUIREMENT.match(text, at)
        if found is None or found.end() == at:
            raise Invalid(f"not a label selector at {text[at : at + 20]!r}")
        at = found.end()
        key = found["absent"] or found["key"]
        if not _LABEL_KEY.fullmatch(key):
            raise Invalid(f"{key!r} is not a label key")
        values = tuple(
            v.strip() for v in (found["values"] or "").split(",") if found["set"] and v.strip()
        )
        if found["value"] is not None:
            values = (found["value"],)
        if not all(_LABEL_VALUE.fullmatch(v) for v in values):
            raise Invalid(f"a value of {key!r} is not a label value")
        if found["absent"]:
            expressions.append(SelectorRequirement(key, "DoesNotExist"))
        elif found["op"] in ("=", "=="):
            if labels.setdefault(key, values[0]) != values[0]:
                raise Invalid(f"{key!r} is given two values")
        elif found["op"] == "!=":
            expressions.append(SelectorRequirement(key, "NotIn", values))
        elif found["set"]:
            if not values:
                raise Invalid(f"{key} {found['set']} () names no value")
            expressions.append(
                SelectorRequirement(key, "In" if found["set"] == "in" else "NotIn", values)
            )
        else:
            expressions.append(SelectorRequirement(key, "Exists"))
    return LabelSelector(frozen_map(labels), tuple(expressions))


_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


# Kubernetes name patterns are shared with the agent (peerplane.names).
is_dns_label = names.is_dns_label
is_dns_subdomain = names.is_dns_subdomain


def is_port_name(text: str) -> bool:
    return bool(_PORT_NAME.fullmatch(text))


def shown(value: str, limit: int = 120) -> str:
    """The value as a warning shows it: printable, bounded (the one rule for every quoted
    value, `peerplane.runtime.untrusted.shown`, with warnings' longer limit)."""
    return untrusted.shown(value, limit)


MAX_POOL_RANGES = 256


@dataclass(frozen=True, slots=True)
class AddressPool:
    """The settings' `gateway-address-pool`: inclusive ranges of IP addresses (as
    integers, with their version), in the order written. A CIDR's network and broadcast
    addresses are not in it (IPv4 up to /30; IPv6 up to /126: not its subnet-router
    address)."""

    ranges: tuple[tuple[int, int, int], ...]  # (version, first, last)

    def __contains__(self, address: object) -> bool:
        if not isinstance(address, str):
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        value = int(ip)
        return any(v == ip.version and lo <= value <= hi for v, lo, hi in self.ranges)

    def addresses(self) -> Iterator[str]:
        """Every address of the pool, in the order written (canonical text)."""
        for version, first, last in self.ranges:
            for value in range(first, last + 1):
                yield str(
                    ipaddress.IPv4Address(value) if version == 4 else ipaddress.IPv6Address(value)
                )


def _pool_range(item: str) -> tuple[int, int, int]:
    """One entry of an address pool: an address, `first-last`, or a CIDR."""
    try:
        if "/" in item:
            network = ipaddress.ip_network(item, strict=False)
            first, last = int(network.network_address), int(network.broadcast_address)
            hosts = network.max_prefixlen - network.prefixlen >= 2
            if hosts:  # not the network (and, IPv4, broadcast) address
                first, last = first + 1, last - (1 if network.version == 4 else 0)
            return network.version, first, last
        start, dash, end = item.partition("-")
        low = ipaddress.ip_address(start.strip())
        high = ipaddress.ip_address(end.strip()) if dash else low
    except ValueError:
        raise Invalid(f"{item!r} is not an IP address, first-last range or CIDR") from None
    if low.version != high.version or int(high) < int(low):
        raise Invalid(f"{item!r}: the range's last address is before its first")
    return low.version, int(low), int(high)


def parse_address_pool(text: str) -> AddressPool:
    """Comma-separated IP addresses, `first-last` ranges and CIDRs (IPv4 or IPv6)."""
    items = [raw.strip() for raw in text.split(",") if raw.strip()]
    if not items:
        raise Invalid("expected at least one address, range or CIDR")
    if len(items) > MAX_POOL_RANGES:
        raise Invalid(f"more than {MAX_POOL_RANGES} entries")
    return AddressPool(tuple(_pool_range(item) for item in items))
