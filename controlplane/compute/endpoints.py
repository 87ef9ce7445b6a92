"""Endpoint selection and canonical order.

The endpoints of a Service port are the ready endpoints of the EndpointSlices labelled
with the Service's name, on the slice port named like the Service port. Canonical order is
IP (numeric, IPv4 before IPv6), then port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from controlplane.compute.types import EndpointKey
from controlplane.model import EndpointSlice, ServicePort

_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})


def canonical_key(endpoint: EndpointKey) -> tuple[int, int, int]:
    address = ipaddress.ip_address(endpoint[0])
    return (address.version, int(address), endpoint[1])


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
                try:
                    address = ipaddress.ip_address(raw)
                except ValueError:
                    continue  # not an IP: never rendered
                found.add((str(address), target))
    return sorted(found, key=canonical_key)
