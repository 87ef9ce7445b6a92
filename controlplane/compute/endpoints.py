"""Endpoint selection and canonical order.

The endpoints of a Service port are the ready endpoints of the EndpointSlices labelled
with the Service's name, on the slice port named like the Service port. Canonical order is
IP (numeric, IPv4 before IPv6), then port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from functools import lru_cache

from controlplane.compute.types import EndpointKey
from controlplane.model import EndpointSlice, ServicePort

_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})


@lru_cache(maxsize=1 << 18)
def parse_ip(text: str) -> tuple[int, bytes, str] | None:
    """(family order, packed address, canonical text), or None when `text` is not an IP.

    inet_pton is strict and fast; the cache matters because the same addresses are
    parsed on every recompute.
    """
    for order, family in ((4, socket.AF_INET), (6, socket.AF_INET6)):
        try:
            packed = socket.inet_pton(family, text)
        except (OSError, ValueError):
            continue
        return order, packed, socket.inet_ntop(family, packed)
    return None


def canonical_key(endpoint: EndpointKey) -> tuple[int, bytes, int]:
    """IPv4 before IPv6, then numeric address (packed bytes compare numerically), then port."""
    parsed = parse_ip(endpoint[0])
    if parsed is None:
        raise ValueError(f"not an IP address: {endpoint[0]!r}")
    return parsed[0], parsed[1], endpoint[1]


def ready_endpoints(slices: Iterable[EndpointSlice], port: ServicePort) -> list[EndpointKey]:
    """Ready (address, port) pairs for `port`, deduplicated, in canonical order."""
    found: set[EndpointKey] = set()
    for endpoint_slice in slices:
        if endpoint_slice.address_type not in _ADDRESS_TYPES:
            continue
        target = next(
            (
                p.port
                for p in endpoint_slice.ports
                if p.name == port.name and p.protocol == port.protocol
            ),
            None,
        )
        if target is None or not 1 <= target <= 65535:
            continue
        for endpoint in endpoint_slice.endpoints:
            if not endpoint.ready:
                continue
            for raw in endpoint.addresses:
                parsed = parse_ip(raw)
                if parsed is not None:  # anything else is never rendered
                    found.add((parsed[2], target))
    return sorted(found, key=canonical_key)
