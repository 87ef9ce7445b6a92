"""One port's hostnames decided alone (`table_update.TableIndex` keeps one `Port` per
port of each workload): the claims and candidates on each hostname, its winners and
conflict losers, and whether an exact hostname is closed or one of its claims refused.

Apart from the index because this is the pure rule a route change is decided by, per
hostname: `precedence.listeners` and `ownership.resolve` restated for one exact hostname
(see table_update.py for why that is the same answer as the whole table's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.routes.ownership import ANY_HOST, Claim, Holding, wider
from controlplane.routes.precedence import Candidate
from controlplane.snapshot import RejectedInput, RouteRule
from peerplane.patterns import WILDCARD_PREFIX

FullKey = tuple[tuple[object, ...], int]
"""A candidate's precedence key and its place among its object's candidates: equal keys
come from one object only, and then its order decides, as the stable sort does."""


@dataclass(slots=True)
class Decided:
    """One hostname's winners (the first candidate of each match key, by precedence)
    and conflict losers."""

    winners: list[tuple[FullKey, RouteRule]] = field(default_factory=list)
    losers: list[tuple[FullKey, RejectedInput]] = field(default_factory=list)


Counts = dict[Claim, int]


@dataclass(slots=True)
class Port:
    """One port of a workload: its claims and candidates by hostname, the hostnames
    decided so far (the others are decided, as they were in the table, when first
    touched), and its rules in precedence order (`keys` and `rules` in step)."""

    holding: Holding
    # its held wildcards and any host, which a change of exact hostnames never moves
    wider: dict[str, Claim]
    claims: dict[str, Counts]
    hosts: dict[str, list[tuple[FullKey, Candidate]]]
    decided: dict[str, Decided]
    keys: list[FullKey]
    rules: list[RouteRule]
    closed: list[str]
    losing: set[str]  # the hostnames with conflict losers

    def conflicts(self) -> list[RejectedInput]:
        """The port's conflict losers in precedence order, as `precedence.listeners`
        reports them."""
        found = [loser for host in self.losing for loser in self.decided[host].losers]
        return [rejection for _, rejection in sorted(found, key=_first)]

    def decided_as_is(self, name: str) -> Decided:
        """`name` decided on its candidates as they are (as the table decided it, while
        none of them moved)."""
        found = self.decided.get(name)
        if found is None:
            refused = self.holding.refused
            found = self.decided[name] = decide(self.hosts.get(name, []), self.holding, refused)
        return found


def _first(item: tuple[FullKey, object]) -> FullKey:
    return item[0]


def decide(
    candidates: list[tuple[FullKey, Candidate]], holding: Holding, refused: Mapping[Claim, Claim]
) -> Decided:
    """A hostname's winners and losers (`precedence.listeners` on its candidates kept:
    those whose claim is not refused and no more specific listener shadows)."""
    taken: dict[tuple[object, ...], Candidate] = {}
    decided = Decided()
    for full, candidate in sorted(candidates, key=_first):
        claim = candidate.claim
        if claim in refused:
            continue
        listener = candidate.listener
        if listener is not None and holding.shadowing(listener, claim.host, claim.namespace):
            continue
        winner = taken.get(candidate.match)
        if winner is None:
            taken[candidate.match] = candidate
            decided.winners.append((full, candidate.rule))
            continue
        if winner.origin == candidate.origin or winner.rule == candidate.rule:
            continue
        name = candidate.rule.hostnames[0] if candidate.rule.hostnames else "*"
        path = candidate.rule.path.value if candidate.rule.path else "/"
        reason = f"same match as {winner.rule.source}, which takes precedence: dropped"
        decided.losers.append((full, candidate.origin.rejection(f"{name}{path}", reason)))
    return decided


def exact_host(host: str) -> bool:
    return bool(host) and not host.startswith(WILDCARD_PREFIX)


def claim_namespaces(claims: Counts | None) -> set[str]:
    return {claim.namespace for claim, count in claims.items() if count} if claims else set()


def host_closed(port: Port, host: str, namespace: str) -> bool:
    """Whether an exact `host` held by `namespace` is closed (`ownership.resolve`): the
    next less specific held hostname (the most specific held wildcard covering it, else
    any host) is another namespace's, or `host` is a held listener hostname under it
    (`ownership._isolated`)."""
    held = port.wider
    if not held:
        return False
    found = next((held[w] for w in wider(host) if w in held), None) or held.get(ANY_HOST)
    if found is None:
        return False
    return found.namespace != namespace or host in port.holding.listeners


def refuses(host: str, claims: Counts, held: Mapping[str, Claim]) -> bool:
    """Whether `ownership.resolve` refuses one of `claims` (all on exact `host`), given
    the port's held wildcards and any host (`held`, which exact claims never refuse):
    oldest first, a claim is refused by the first accepted claim on `host`, else by the
    most specific wildcard covering `host` held by an older claim, of another namespace."""
    covering = [held[w] for w in wider(host) if w in held] if held else []
    holder: Claim | None = None
    for claim in sorted(claim for claim, count in claims.items() if count > 0):
        found = holder
        if found is None:
            found = next((w for w in covering if w < claim), None)
        if found is not None and found.namespace != claim.namespace:
            return True
        if holder is None:
            holder = claim
    return False


def add_claim(claims: dict[str, Counts], claim: Claim, step: int) -> None:
    counts = claims.get(claim.host)
    if counts is None:
        counts = claims[claim.host] = {}
    counts[claim] = counts.get(claim, 0) + step
    if not counts[claim]:
        del counts[claim]
