"""Where a HAProxy workload's Gateways and Ingresses are reached: the addresses the Lease
holder publishes in their status (pure).

A workload whose pods a Service of the settings' `publish-service` selects (same
namespace, its `spec.selector` matching a pod's labels) publishes that Service's
`status.loadBalancer.ingress` (its IPs and hostnames) and nothing else: while the load
balancer has none yet it publishes none, rather than pod addresses that external-dns or a
client would then use. Any other workload publishes its Running, not terminating pods'
addresses: the node's (`status.hostIP`) for a `hostNetwork` pod, else `status.podIP`.
Either way deduplicated and sorted (IPv4, IPv6, then hostnames), so the same cluster
always gives the same list and an unrelated change rewrites no status. A Gateway lists the
first 16 (its CRD's limit); an Ingress all.

A Gateway lists its workload's addresses; with `spec.addresses` it lists those of them
that the workload has (IPs compared canonically, hostnames without case), in the
order requested, and is `Programmed: False` (`AddressNotUsable`) while any is not one of
them; a workload with no address yet makes it `Programmed: False` (`AddressNotAssigned`).
An address type other than IPAddress and Hostname is refused at placement
(`Accepted: False`, `UnsupportedAddress`).

With the settings' `gateway-address-pool`, each served Gateway gets an address of its own
(`own_addresses`): its HTTP and HTTPS listeners bind that address only, and its status
lists that address alone. It keeps it for its life: the oldest Gateways first
(creationTimestamp, then namespace/name), a Gateway keeps the pool address its
`status.addresses` already lists (a control-plane restart, another Gateway's deletion
never moves it); then a Gateway whose `spec.addresses` names pool addresses gets the
first free one of them; then every other Gateway without `spec.addresses` gets the first
free address in the pool's order. A HAProxy pod's address is never given. A Gateway that
gets none (the pool is exhausted, or the
pool address it requests is another Gateway's) is served on its workload's addresses, and
its Programmed condition says why.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.model import Gateway, GatewayAddress, Pod, Service
from controlplane.routes import names
from controlplane.settings.values import AddressPool
from peerplane.addresses import AddressError, canonical_address
from peerplane.names import is_host_name

IP_ADDRESS = names.IP_ADDRESS
HOSTNAME = names.HOSTNAME
MAX_GATEWAY_ADDRESSES = 16
"""The Gateway CRD's `status.addresses` MaxItems: a longer list is refused whole."""


@dataclass(frozen=True, slots=True)
class Published:
    """A workload's addresses (sorted, no duplicates) and where they come from, as a
    condition message says it."""

    addresses: tuple[GatewayAddress, ...]
    source: str


def _ip(text: str) -> str | None:
    """`text` in canonical form when it is an IP address, else None."""
    try:
        return canonical_address(text)
    except AddressError:
        return None


def _sort_key(address: GatewayAddress) -> tuple[int, int, str]:
    if address.type == IP_ADDRESS:
        ip = ipaddress.ip_address(address.value)
        return (ip.version, int(ip), "")
    return (7, 0, address.value)


def _ordered(addresses: Iterable[GatewayAddress]) -> tuple[GatewayAddress, ...]:
    return tuple(sorted(set(addresses), key=_sort_key))


def pod_address(pod: Pod) -> str | None:
    """Where `pod` is reached from outside: the node's address with hostNetwork, else
    the pod's; None while it does not serve (not Running, terminating) or has none."""
    if pod.phase != "Running" or pod.deleting:
        return None
    return _ip((pod.host_ip or pod.ip) if pod.host_network else pod.ip)


def pod_addresses(pods: Iterable[Pod]) -> tuple[GatewayAddress, ...]:
    found = (pod_address(pod) for pod in pods)
    return _ordered(GatewayAddress(IP_ADDRESS, ip) for ip in found if ip)


def balancer_addresses(service: Service) -> tuple[GatewayAddress, ...]:
    """A Service's load-balancer ingress: each entry's IP, else its hostname; one that is
    neither an IP nor a host name is left out (the Gateway CRD would refuse the whole
    status for it)."""
    found: list[GatewayAddress] = []
    for entry in service.load_balancer:
        ip = _ip(entry.ip) if entry.ip else None
        hostname = entry.hostname.lower()
        if ip is not None:
            found.append(GatewayAddress(IP_ADDRESS, ip))
        elif is_host_name(hostname):
            found.append(GatewayAddress(HOSTNAME, hostname))
    return _ordered(found)


def selects(service: Service, pods: Iterable[Pod]) -> bool:
    """Whether `service` selects any of `pods` (a Service without a selector: none)."""
    if not service.selector:
        return False
    return any(
        pod.namespace == service.namespace
        and all(pod.labels.get(key) == value for key, value in service.selector.items())
        for pod in pods
    )


def published_addresses(
    workload_pods: Mapping[str, Sequence[Pod]],
    services: Iterable[Service],
    publish: Collection[str],
) -> dict[str, Published]:
    """Each workload's ("namespace/name") published addresses; `publish`: the settings'
    `publish-service` ("namespace/name" of Services)."""
    listed = [s for s in services if f"{s.namespace}/{s.name}" in publish]
    out: dict[str, Published] = {}
    for workload, pods in workload_pods.items():
        fronting = sorted(
            (s for s in listed if selects(s, pods)), key=lambda s: (s.namespace, s.name)
        )
        if fronting:
            refs = ", ".join(f"{s.namespace}/{s.name}" for s in fronting)
            addresses = _ordered(a for s in fronting for a in balancer_addresses(s))
            out[workload] = Published(addresses, f"the load balancer of Service {refs}")
        else:
            out[workload] = Published(pod_addresses(pods), f"the pods of workload {workload}")
    return out


def _same(requested: GatewayAddress, published: GatewayAddress) -> bool:
    if requested.type != published.type:
        return False
    if requested.type == IP_ADDRESS:
        return _ip(requested.value) == published.value
    return requested.value.lower() == published.value


@dataclass(frozen=True, slots=True)
class AddressProblem:
    """Why a Gateway is not programmed for its addresses: a Programmed reason, a message."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class GatewayAddresses:
    """What a Gateway's status says of its addresses: the list, and why it is not
    programmed (None: nothing against it)."""

    addresses: tuple[GatewayAddress, ...]
    problem: AddressProblem | None = None


@dataclass(frozen=True, slots=True)
class OwnAddress:
    """A Gateway's address of its own ("" : none, it is on its workload's addresses) and,
    with none, why (a condition message; "" when no pool is set)."""

    address: str = ""
    why_none: str = ""


def _age(gateway: Gateway) -> tuple[str, str, str]:
    return (gateway.creation_timestamp or "~", gateway.namespace, gateway.name)


def _pool_requests(gateway: Gateway, pool: AddressPool) -> list[str]:
    """The IPAddress entries of `gateway`'s spec.addresses in `pool`, canonical, in order."""
    found: list[str] = []
    for wanted in gateway.addresses:
        ip = _ip(wanted.value) if wanted.type == IP_ADDRESS else None
        if ip is not None and ip in pool and ip not in found:
            found.append(ip)
    return found


def own_addresses(
    gateways: Iterable[Gateway], pool: AddressPool | None, pods: Collection[str] = ()
) -> dict[tuple[str, str], OwnAddress]:
    """Each Gateway's (by namespace, name) address of its own from `pool` (the module's
    rule); `gateways`: the served ones, of every workload (one pool, no address twice).
    `pods`: the HAProxy pods' addresses, never given (a pod's every-address frontends
    already bind them: two frontends on one address and port would split its requests)."""
    if pool is None:
        return {}
    order = sorted(gateways, key=_age)
    given: dict[tuple[str, str], OwnAddress] = {}
    holders: dict[str, Gateway | None] = dict.fromkeys(pods)

    def give(gateway: Gateway, ip: str) -> None:
        given[gateway.namespace, gateway.name] = OwnAddress(ip)
        holders[ip] = gateway

    for gateway in order:  # kept: the pool address its status lists, still fitting
        requested = _pool_requests(gateway, pool)
        for listed in gateway.status_addresses:
            ip = _ip(listed.value) if listed.type == IP_ADDRESS else None
            if ip is None or ip not in pool or ip in holders:
                continue
            if not gateway.addresses or ip in requested:
                give(gateway, ip)
                break
    for gateway in order:  # static: the first free pool address of its spec.addresses
        key = (gateway.namespace, gateway.name)
        requested = _pool_requests(gateway, pool)
        if key in given or not requested:
            continue
        free = next((ip for ip in requested if ip not in holders), None)
        if free is not None:
            give(gateway, free)
            continue
        holder = holders[requested[0]]
        owner = (
            f"the older Gateway {holder.namespace}/{holder.name}"
            if holder is not None
            else "a HAProxy pod"
        )
        given[key] = OwnAddress(why_none=f"spec.addresses {requested[0]} is the address of {owner}")
    addresses = pool.addresses()
    for gateway in order:  # new: the first free address of the pool
        key = (gateway.namespace, gateway.name)
        if key in given or gateway.addresses:
            continue
        free = next((ip for ip in addresses if ip not in holders), None)
        if free is None:
            given[key] = OwnAddress(
                why_none="the settings' gateway-address-pool has no free address"
            )
        else:
            give(gateway, free)
    return given


def gateway_addresses(
    requested: Sequence[GatewayAddress], published: Published, own: OwnAddress | None = None
) -> GatewayAddresses:
    """The addresses a Gateway requesting `requested` (its `spec.addresses`) is given;
    `own`: its address of its own, if any (then that one alone)."""
    if own is not None and own.address:
        return _own_addresses(requested, own.address)
    if own is not None and own.why_none:
        published = Published(published.addresses, f"{published.source} ({own.why_none})")
    if not published.addresses:
        return GatewayAddresses(
            (),
            AddressProblem(
                names.ADDRESS_NOT_ASSIGNED, f"no address yet: {published.source} has none"
            ),
        )
    if not requested:
        return GatewayAddresses(published.addresses[:MAX_GATEWAY_ADDRESSES])
    usable: list[GatewayAddress] = []
    unusable: list[GatewayAddress] = []
    for wanted in requested:
        found = next((a for a in published.addresses if _same(wanted, a)), None)
        if found is None:
            unusable.append(wanted)
        elif found not in usable:
            usable.append(found)
    if not unusable:
        return GatewayAddresses(tuple(usable))
    missing = ", ".join(f"{a.type} {a.value}" for a in unusable)
    shown = published.addresses[:MAX_GATEWAY_ADDRESSES]  # a condition message is bounded
    more = len(published.addresses) - len(shown)
    has = ", ".join(a.value for a in shown) + (f" and {more} more" if more else "")
    return GatewayAddresses(
        tuple(usable),
        AddressProblem(
            names.ADDRESS_NOT_USABLE,
            f"spec.addresses {missing}: not an address of {published.source} ({has}); "
            "request one of these or remove it",
        ),
    )


def _own_addresses(requested: Sequence[GatewayAddress], address: str) -> GatewayAddresses:
    """A Gateway with an address of its own lists it alone; any other address its
    spec.addresses requests is not usable (its listeners bind that address only)."""
    listed = (GatewayAddress(IP_ADDRESS, address),)
    unusable = [a for a in requested if not _same(a, listed[0])]
    if not unusable:
        return GatewayAddresses(listed)
    missing = ", ".join(f"{a.type} {a.value}" for a in unusable)
    return GatewayAddresses(
        listed,
        AddressProblem(
            names.ADDRESS_NOT_USABLE,
            f"spec.addresses {missing}: not in the settings' gateway-address-pool or the "
            f"address of another Gateway; this Gateway's address is {address}; "
            "request a free pool address or remove it",
        ),
    )


def ingress_entries(published: Published | None) -> list[dict[str, str]]:
    """An Ingress's `status.loadBalancer.ingress` from its workload's addresses."""
    if published is None:
        return []
    return [
        {"ip": a.value} if a.type == IP_ADDRESS else {"hostname": a.value}
        for a in published.addresses
    ]
