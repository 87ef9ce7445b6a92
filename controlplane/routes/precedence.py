"""Candidate rules ordered by the Gateway API's precedence, conflicts dropped, grouped
into listeners.

Every candidate serves one hostname (or any host), so ordering all of a port's
candidates by one key gives "the first rule that matches serves" the spec's meaning
(HTTPRouteRule, "precedence"): the most characters in a matching non-wildcard hostname,
then in a matching hostname; an Exact path over a PathPrefix, then the longest path; a
method match; the most header matches; the most query parameter matches; then the oldest
object by creationTimestamp, its "namespace/name", and its rule and match order. Ingress
rules on the same port are ranked by the same key (exact host over wildcard, Exact over
Prefix, longest path). Two candidates with the same host, path, method, headers and query
parameters conflict: the first keeps them, the other is dropped and reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from controlplane.routes.ownership import Claim, Holding
from controlplane.settings.values import shown
from controlplane.snapshot import HttpListener, RejectedInput, RouteRule
from peerplane.patterns import WILDCARD_PREFIX


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a candidate comes from, as a rejection names it."""

    kind: str  # "HTTPRoute" or "Ingress"
    namespace: str
    name: str
    key: str  # "spec.rules[0].matches[1]"

    def rejection(self, value: str, reason: str, key: str = "") -> RejectedInput:
        return RejectedInput(
            self.kind, self.namespace, self.name, key or self.key, shown(value), reason
        )

    @classmethod
    def listener_hostname(cls, namespace: str, name: str, index: int) -> Origin:
        """A Gateway listener's hostname: where its claim's refusal is reported."""
        return cls("Gateway", namespace, name, f"spec.listeners[{index}].hostname")


@dataclass(slots=True)
class Refusals:
    """Hostname claims refused on a port (ownership.py), each reported once per object,
    hostname and port, on its object."""

    rejections: list[RejectedInput]
    _told: set[tuple[str, str, str, str, int]] = field(default_factory=set)

    def refuse(
        self, origin: Origin, holding: Holding, claim: Claim, port: int, outcome: str
    ) -> None:
        said = (origin.kind, origin.namespace, origin.name, claim.host, port)
        if said not in self._told:
            self._told.add(said)
            reason = f"{holding.why(claim, port)}: {outcome}"
            self.rejections.append(origin.rejection(claim.host or "*", reason))


@dataclass(frozen=True, slots=True)
class Candidate:
    """One rule for one hostname on one port. Its sort key and conflict key are computed
    once, when the object's outcome is: a route change re-ranks that route's candidates
    only, and ordering a port is one sort over keys already made."""

    port: int
    rule: RouteRule
    origin: Origin
    age: str  # creationTimestamp; "~" (after every timestamp) when unknown
    order: tuple[int, int]  # rule and match (or path) index within the object
    claim: Claim  # the hostname it serves, held by its listener's namespace (ownership.py)
    listener: str | None = None  # the hostname of its Gateway listener; None: an Ingress's
    key: tuple[object, ...] = field(init=False, repr=False, compare=False)
    match: tuple[object, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _rank(self))
        object.__setattr__(self, "match", match_key(self.rule))


def _rank(candidate: Candidate) -> tuple[object, ...]:
    """The sort key (`Candidate.key`): a smaller key takes precedence."""
    rule = candidate.rule
    host = rule.hostnames[0] if rule.hostnames else ""
    exact_host = len(host) if host and not host.startswith(WILDCARD_PREFIX) else 0
    path = rule.path
    exact = path is not None and path.type == "Exact"
    path_len = len(path.value) if path is not None else 0
    origin = candidate.origin
    return (
        -exact_host,
        -len(host),
        not exact,
        -path_len,
        not rule.method,
        -len(rule.headers),
        -len(rule.query_params),
        candidate.age,
        origin.namespace,
        origin.name,
        origin.kind,
        candidate.order,
    )


def match_key(rule: RouteRule) -> tuple[object, ...]:
    """What two rules must not share: host, path, method, headers (names in any case),
    query parameters."""
    path = rule.path
    return (
        rule.hostnames,
        (path.type, path.value) if path is not None else ("PathPrefix", "/"),
        rule.method,
        tuple(sorted((name.lower(), value) for name, value in rule.headers)),
        tuple(sorted(rule.query_params)),
    )


_KEY = attrgetter("key")


def listeners(
    candidates: Iterable[Candidate],
    defaults: Mapping[int, str],
    rejections: list[RejectedInput],
) -> tuple[HttpListener, ...]:
    """The listeners of one workload, sorted by port; `defaults` maps a port to its
    default backend. Conflict losers are appended to `rejections`."""
    by_port: dict[int, list[Candidate]] = {port: [] for port in defaults}
    for candidate in candidates:
        by_port.setdefault(candidate.port, []).append(candidate)
    built: list[HttpListener] = []
    for port in sorted(by_port):
        taken: dict[tuple[object, ...], Candidate] = {}
        rules: list[RouteRule] = []
        for candidate in sorted(by_port[port], key=_KEY):
            key = candidate.match
            winner = taken.get(key)
            if winner is None:
                taken[key] = candidate
                rules.append(candidate.rule)
                continue
            if winner.origin == candidate.origin or winner.rule == candidate.rule:
                continue  # the same rule reached through two listeners of one port
            host = candidate.rule.hostnames[0] if candidate.rule.hostnames else "*"
            path = candidate.rule.path.value if candidate.rule.path else "/"
            rejections.append(
                candidate.origin.rejection(
                    f"{host}{path}",
                    f"same match as {winner.rule.source}, which takes precedence: dropped",
                )
            )
        built.append(HttpListener(port, tuple(rules), defaults.get(port, "")))
    return tuple(built)
