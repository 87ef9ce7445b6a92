"""Endpoint selection and canonical order.

The endpoints of a Service port are the ready endpoints of the EndpointSlices labelled
with the Service's name, on the slice port named like the Service port. Canonical order is
IP (numeric, IPv4 before IPv6), then port.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from controlplane.model import EndpointSlice, ServicePort
from controlplane.snapshot import EndpointKey
from peerplane.addresses import Address, AddressError, parse_address

_ADDRESS_TYPES = frozenset({"IPv4", "IPv6"})


@lru_cache(maxsize=1 << 18)
def parse_ip(text: str) -> Address | None:
    """The address in the shared canonical form (slot keys are its text, so the slot
    state and the agent agree on it), or None when `text` is not an address without zone.

    Cached here too: one lookup per call keeps sorting 40k endpoints as cheap as before.
    """
    try:
        return parse_address(text)
    except AddressError:
        return None


def ready_endpoints(slices: Iterable[EndpointSlice], port: ServicePort) -> list[EndpointKey]:
    """Ready (address, port) pairs for `port`, deduplicated, in canonical order.

    Each pair's sort key (IPv4 before IPv6, the packed address, the port) is made from the
    address parsed here, not parsed again: 160,000 endpoints at a start of 8,000 Services."""
    found: dict[EndpointKey, tuple[int, bytes, int]] = {}
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
                    found[parsed.text, target] = (parsed.version, parsed.packed, target)
    return sorted(found, key=found.__getitem__)
