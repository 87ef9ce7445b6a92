"""Which namespace holds each hostname of a shared port (pure): no namespace takes the
requests for a hostname another namespace already serves there.

A claim is a hostname (exact, `*.` wildcard, or "" for any host) on one port of one
workload, by one namespace, since a creationTimestamp. Claims come from a Gateway
listener (its hostname; none: any host; since the Gateway's creation), from each host a
route serves through a listener (held by the listener's namespace, since the later of
the Gateway's and the route's creation), from each Ingress rule host (since the
Ingress's creation) and an Ingress defaultBackend (any host).

The oldest claim first (creationTimestamp, then namespace and holder): a claim is refused
when an accepted claim of another namespace covers it: the same hostname, or a wildcard
matching it ("" covers only ""). Claims of one namespace never refuse each other. A
request is then answered by the namespace holding the most specific hostname that matches
it: where the next less specific hostname on the port (a wildcard, then any host and
the defaultBackend) is held by another namespace, the lookup stops at the hostname
(`closed`): a request its holder does not route gets a 404, never another namespace's
rule.

Within a namespace, Gateway listeners isolate their routes (Gateway API, Listener
hostname; the conformance test GatewayHTTPListenerIsolation): a request belongs to the
most specific held listener hostname matching it, and only the routes attached through
that listener take it. A candidate whose hostname a more specific listener of its
namespace covers is never served (`Holding.shadowing`), and a held listener hostname
under any less specific held hostname is closed (whatever claims that one is another
listener's, an Ingress's or another namespace's). Equal listener hostnames of one
namespace share; across namespaces the rule above decides (the older claim keeps a host,
even under a newer, more specific listener). An Ingress has no listener: its rules are
never shadowed, and its hosts share the namespace's listeners' hostnames they name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from peerplane.patterns import WILDCARD_PREFIX, host_matches

ANY_HOST = ""


class Claim(NamedTuple):
    """One namespace's claim on a hostname of a port. A tuple: the claims of a port sort
    oldest first as they are (creationTimestamp, then namespace and holder), and hash and
    compare at C speed (every candidate rule carries one; a change resolves them all)."""

    age: str  # creationTimestamp; "~" (after every timestamp) when unknown
    namespace: str  # the namespace holding it: a listener's Gateway's, an Ingress's
    holder: str  # what claims it, as messages name it: "Gateway ns/web listener http"
    host: str  # exact, "*.suffix" or "" (any host)


def later(*ages: str) -> str:
    """The later of creationTimestamps ("" and "~": unknown, after every timestamp)."""
    return max(age or "~" for age in ages)


def covers(held: str, host: str) -> bool:
    """Whether a claim on `held` covers a claim on `host`: the same hostname, or a
    wildcard matching it (a narrower wildcard too); any host ("") covers only itself."""
    if held == host:
        return True
    if not held.startswith(WILDCARD_PREFIX) or not host:
        return False
    return host_matches(held, host.removeprefix("*"))


def _host_shown(host: str) -> str:
    return host or "any host"


@dataclass(frozen=True, slots=True)
class Holding:
    """The outcome on one port: the namespace holding each hostname, why each refused
    claim is refused, and the hostnames a lookup stops at."""

    holders: dict[str, Claim]  # hostname -> its oldest accepted claim
    refused: dict[Claim, Claim]  # a refused claim -> the accepted claim that covers it
    closed: tuple[str, ...]  # sorted
    listeners: dict[str, str] = field(default_factory=dict)  # held listener hostname -> ns
    # the namespaces holding two listener hostnames or more: only theirs can shadow
    isolating: frozenset[str] = frozenset()

    def shadowing(self, listener: str, host: str, namespace: str) -> str | None:
        """The listener hostname of `namespace` more specific than `listener` (which a
        candidate for `host` attaches through) that covers `host`: requests for it are
        that listener's, so the candidate is never served. None: the candidate's own."""
        if namespace not in self.isolating or not host:
            return None
        for wider_host in (host, *wider(host)):
            if wider_host == listener:
                return None
            if self.listeners.get(wider_host) == namespace:
                return wider_host
        return None

    def why(self, claim: Claim, port: int) -> str:
        """The reason a refused claim is refused, as a rejection says it."""
        by = self.refused[claim]
        return (
            f"hostname {_host_shown(claim.host)} on port {port} is held by the older {by.holder} "
            f"(namespace {by.namespace}, {_host_shown(by.host)})"
        )


def wider(host: str) -> list[str]:
    """The wildcards that cover `host` other than itself, the most specific first:
    "a.b.x" -> "*.b.x", "*.x"; "*.b.x" -> "*.x"."""
    labels = host.removeprefix(WILDCARD_PREFIX).split(".")
    first = 0 if host.startswith(WILDCARD_PREFIX) else 1
    return [WILDCARD_PREFIX + ".".join(labels[at:]) for at in range(first, len(labels)) if at]


def resolve(claims: Iterable[Claim], listeners: Collection[Claim] = ()) -> Holding:
    """Accept and refuse `claims` of one port, oldest first; the hostnames to close.
    `listeners`: those of `claims` that are Gateway listeners' hostnames (isolated)."""
    holders: dict[str, Claim] = {}
    refused: dict[Claim, Claim] = {}
    wildcards = False  # whether a wildcard is held yet (most ports have none)
    for claim in sorted(set(claims)):
        # The same hostname held decides; else the most specific held wildcard covering
        # it (all of them are one namespace's or older claims were refused).
        found = holders.get(claim.host)
        if found is None and wildcards and claim.host:
            found = next((holders[w] for w in wider(claim.host) if w in holders), None)
        if found is not None and found.namespace != claim.namespace:
            refused[claim] = found
            continue
        if claim.host not in holders:
            holders[claim.host] = claim
            wildcards = wildcards or claim.host.startswith(WILDCARD_PREFIX)
    held_listeners: dict[str, str] = {}
    for claim in sorted(listeners):
        if claim not in refused:
            held_listeners.setdefault(claim.host, claim.namespace)
    closed = _closed(holders, wildcards)
    if len(holders) > 1 and held_listeners:
        closed = tuple(sorted({*closed, *_isolated(holders, held_listeners)}))
    counts = Counter(held_listeners.values())
    isolating = frozenset(namespace for namespace, count in counts.items() if count > 1)
    return Holding(holders, refused, closed, held_listeners, isolating)


def _isolated(holders: dict[str, Claim], listeners: dict[str, str]) -> list[str]:
    """The held listener hostnames under a less specific held hostname: a request for
    one ends at its listener's routes (whatever holds the wider one is not its listener:
    that listener's routes serve its own hostname or narrower ones)."""
    return [
        host
        for host in listeners
        if host and (ANY_HOST in holders or any(w in holders for w in wider(host)))
    ]


def _closed(holders: dict[str, Claim], wildcards: bool) -> tuple[str, ...]:
    """The held hostnames whose next less specific held one (the longest held wildcard
    matching them, else any host) is another namespace's."""
    any_host = holders.get(ANY_HOST)
    closed = []
    for host, claim in holders.items():
        if host == ANY_HOST:
            continue
        found = next((w for w in wider(host) if w in holders), None) if wildcards else None
        wider_claim = holders[found] if found is not None else any_host
        if wider_claim is not None and wider_claim.namespace != claim.namespace:
            closed.append(host)
    return tuple(sorted(closed))
