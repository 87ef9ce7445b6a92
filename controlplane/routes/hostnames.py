"""A route's hostnames intersected with a listener's (Gateway API, HTTPRoute.hostnames)."""

from __future__ import annotations

from peerplane.patterns import WILDCARD_PREFIX, host_matches


def _wild(host: str) -> bool:
    return host.startswith(WILDCARD_PREFIX)


def intersect_one(route_host: str, listener_host: str) -> str | None:
    """The hostnames both answer, as one name or wildcard, or None: the more specific of
    the two when one contains the other."""
    if route_host == listener_host:
        return route_host
    if _wild(listener_host) and host_matches(listener_host, route_host.removeprefix("*")):
        # an exact route host under a wildcard listener, or a narrower wildcard
        return route_host
    if _wild(route_host) and host_matches(route_host, listener_host.removeprefix("*")):
        return listener_host
    return None


def intersect(route_hosts: tuple[str, ...], listener_host: str) -> tuple[str, ...] | None:
    """The hostnames of a route on a listener: () for any host; None when both name
    hosts and none intersect (the route does not attach to that listener)."""
    if not listener_host:
        return route_hosts
    if not route_hosts:
        return (listener_host,)
    found: list[str] = []
    for host in route_hosts:
        common = intersect_one(host, listener_host)
        if common is not None and common not in found:
            found.append(common)
    return tuple(found) or None
