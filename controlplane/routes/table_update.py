"""A route table updated for changed HTTPRoutes and GRPCRoutes in O(changed): the same
table `build_table` computes from scratch (tests/routes/test_table_update.py), without
a Python loop over every route or rule.

`TableIndex` is made from a traced build (`table_stages.Trace`) when the first route
change after it comes, and kept with its table: each workload's ports, and per port and
hostname the claims and candidates on it, its winners (the first candidate of each match
key, by precedence) and its conflict losers (decided when the hostname is first touched,
as the table decided it). Conflicts and precedence are per hostname (the match key holds
it, every candidate serves one hostname), so a route change decides again only the
hostnames its old and new candidates serve, and moves their winners in the port's rules,
kept sorted by precedence key (bisect; the tuple is a C-speed copy). Ownership is
decided again only for those hostnames too (ownership.py): an exact claim covers only
its own hostname, so a change of exact hostnames moves no wildcard or any-host holding
(`host_decisions.Port.wider`, kept from the build), and while none of the hostname's
claims is refused it moves no held listener hostname either (nor, then, what
`Holding.shadowing` answers). An exact hostname's claims are then resolved alone against
those holdings (`host_decisions.refuses`, `resolve`'s rule for one hostname); one none
of whose claims is refused before and after keeps every candidate but those a more
specific listener of its namespace shadows, and is closed when the most specific held
wildcard covering it, else any host, is another namespace's, or it is a held listener
hostname under one (`host_decisions.host_closed`; `ownership._closed` and `_isolated`).
So ports holding a wildcard listener hostname (thousands of exact routes under
`*.demo.example.com`) are updated too.

A changed route's rejections are put in the table's and its workloads' among the other
routes' in route order (the routes with rejections are kept by that order: few have any).

A workload with lanes (Gateways of their own addresses, `placement.lane`) is indexed per
lane, as the build decides it: each lane's table is kept as built before the join, and a
workload whose lanes' tables changed is joined again as the build joins it
(`table_stages.join_lanes`, O(its listeners and rejections)), then what the build added
after the join (session persistence's refusals); its backend names are counted across
its lanes. A change of placement (the lanes themselves) is a table from scratch: the route
computer updates only while the Gateways as routes read them are equal.

`update` answers None (compute from scratch) when a change is outside what it covers: a
changed route with session persistence, a hostname with a claim
refused before or after the change (claimed by two namespaces, or under another
namespace's wildcard held by an older claim), a wildcard or any-host candidate (a route's
or its listener's hostname), a port the workload does not listen on, TLS or TCP routes
reaching backends, or more than `route_changes.MAX_CHANGED` routes.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.model import ClusterState, GRPCRoute, HTTPRoute, Service
from controlplane.routes.backends import ServiceKey
from controlplane.routes.host_decisions import (
    Counts,
    FullKey,
    Port,
    add_claim,
    claim_namespaces,
    decide,
    exact_host,
    host_closed,
    refuses,
)
from controlplane.routes.httproute import RouteOutcome, route_outcome
from controlplane.routes.placement import LANE_SEPARATOR, Placement, lane_workload
from controlplane.routes.precedence import Candidate
from controlplane.routes.route_changes import RouteKeys, changed_routes
from controlplane.routes.table_stages import Held, Trace, by_namespace, join_lanes, lane_parts
from controlplane.routes.table_types import Memo, RouteTable, WorkloadRoutes
from controlplane.snapshot import EditedRules, RejectedInput, RouteRule
from peerplane.persistent import persistent


@dataclass(slots=True)
class _Names:
    """The backend names a workload's listeners reference (rules and defaults), counted;
    one for a workload and all its lanes (its table joins theirs)."""

    counts: Counter[str]
    ordered: tuple[str, ...] | None = None  # sorted, "" left out; None: to sort again

    def sorted(self) -> tuple[str, ...]:
        if self.ordered is None:
            self.ordered = tuple(sorted(self.counts.keys() - {""}))
        return self.ordered


@dataclass(slots=True)
class _Workload:
    """One workload or lane (`placement.lane`): what its build decided, its ports, its
    conflicts and the backend names its listeners reference."""

    held: Held
    ports: dict[int, Port]
    conflicts: tuple[RejectedInput, ...]  # refusals, then each port's conflicts
    at: int  # where they start in the table's rejections
    own: int  # its table's rejections start with its own (`Held.own`), then conflicts
    routes: int  # how many of its own are the routes' (from `Held.routes_from`)
    names: _Names  # its workload's: shared by the workload's lanes


class TableIndex:
    """What a table's listeners were decided from, by workload (see the module)."""

    def __init__(self, table: RouteTable, traced: Trace) -> None:
        trace = traced.workloads
        self.table = table
        # The last update's (workload, port) -> hostnames decided again: the listener
        # rule groups that may differ from the table before it (the others' rules are
        # the same objects in the same order). A lane's key (`namespace/name@address`)
        # names the listener of that address.
        self.changed: dict[tuple[str, int], frozenset[str]] = {}
        self._workloads: dict[str, _Workload] = {}
        self._serial = 0
        self.usable = not any(outcome.names for outcome in table.l4.routes.values())
        # The workloads with lanes: their keys in join order, each key's table before the
        # join (the table has only the joined one) and what the table adds after the join
        # (session persistence's refusals).
        self._lanes = lane_parts(trace)
        self._parts = {
            key: found
            for key, found in traced.parts.items()
            if lane_workload(key)[0] in self._lanes
        }
        self._after: dict[str, tuple[RejectedInput, ...]] = {}
        # (Service, workload) -> how many objects route it there (`RouteTable.demand`).
        self._demand: dict[ServiceKey, dict[str, int]] = {}
        # The routes with rejections, by their order in the table: (namespace, name,
        # kind) -> their rejections and the workloads they are reported on.
        self._rejecting: dict[tuple[str, str, str], tuple[RejectedInput, ...]] = {}
        self._reported: dict[tuple[str, str, str], frozenset[str]] = {}
        self._routes_from = traced.routes_from
        self._routes_count = 0  # how many rejections of the table's are the routes'
        # (Service, backend) -> how many GRPCRoutes reach it (`RouteTable.h2_names`).
        self._h2: dict[ServiceKey, dict[str, int]] = {}
        for (kind, namespace, name), route in table.routes.items():
            if route.demand:
                self._count(route.demand, 1)
            if route.h2:
                _count_into(self._h2, route.h2, 1)
            if route.rejections:
                self._rejecting[namespace, name, kind] = tuple(route.rejections)
                self._reported[namespace, name, kind] = frozenset(route.workloads)
                self._routes_count += len(route.rejections)
        for ingress in table.ingresses.values():
            if ingress.workload:
                self._count(((s, ingress.workload) for s in ingress.demand), 1)
        self._count(table.l4.demand, 1)
        if not self.usable:
            return
        for workload, keys in self._lanes.items():
            joined = join_lanes([self._parts[key] for key in keys])
            self._after[workload] = table.workloads[workload].rejections[len(joined.rejections) :]
        shared: dict[str, _Names] = {}  # a workload's with lanes
        for workload in sorted(trace):
            held = trace[workload]
            routes = self._parts[workload] if workload in self._parts else table.workloads[workload]
            ports = {
                listener.port: self._port(held, listener.port, listener.rules)
                for listener in routes.listeners
                if listener.port in held.holdings
            }
            found = [
                rejection
                for port in sorted({*held.defaults, *ports})
                if port in ports
                for rejection in ports[port].conflicts()
            ]
            conflicts = (*held.refusals, *found, *held.certificates)
            of = lane_workload(workload)[0]
            names = shared.get(of)
            if names is None:
                names = _Names(Counter(), None if of in self._lanes else routes.names)
                if of in self._lanes:
                    shared[of] = names
            names.counts.update(li.default_backend for li in routes.listeners)
            names.counts.update(
                backend.backend
                for listener in routes.listeners
                for rule in listener.rules
                for backend in rule.backends
            )
            routes_of = sum(
                len(found)
                for key, found in self._rejecting.items()
                if workload in self._reported[key]
            )
            # Its candidates and claims are in `ports` now: the build's are not kept (a
            # route's first change would leave its first candidate alive, issue 33).
            kept = dataclasses.replace(held, candidates=(), claims=())
            self._workloads[workload] = _Workload(
                kept, ports, conflicts, held.at, held.own, routes_of, names
            )

    def _count(self, pairs: Iterable[tuple[ServiceKey, str]], step: int) -> set[ServiceKey]:
        moved: set[ServiceKey] = set()
        for service, workload in pairs:
            if LANE_SEPARATOR in workload:
                workload = lane_workload(workload)[0]
            counts = self._demand.get(service)
            if counts is None:
                counts = self._demand[service] = {}
            counts[workload] = counts.get(workload, 0) + step
            if not counts[workload]:
                del counts[workload]
            moved.add(service)
        return moved

    def _port(self, held: Held, number: int, rules: tuple[RouteRule, ...]) -> Port:
        """The port's index: its candidates and claims by hostname, the hostnames with
        conflicts decided, and its rules' keys (each rule is its winner's object)."""
        holding = held.holdings[number]
        wider_held = {
            host: claim for host, claim in holding.holders.items() if not exact_host(host)
        }
        claims: dict[str, Counts] = {}
        hosts: dict[str, list[tuple[FullKey, Candidate]]] = {}
        key_of: dict[int, FullKey] = {}
        seen: set[tuple[object, ...]] = set()
        clashing: set[str] = set()
        for serial, candidate in enumerate(held.candidates, self._serial):
            if candidate.port != number:
                continue
            claim = candidate.claim
            host = claim.host
            add_claim(claims, claim, 1)
            full = (candidate.key, serial)
            found = hosts.get(host)
            if found is None:
                hosts[host] = [(full, candidate)]
            else:
                found.append((full, candidate))
            key_of.setdefault(id(candidate.rule), full)
            if candidate.match in seen:
                clashing.add(host)  # two candidates of one match key: maybe a conflict
            else:
                seen.add(candidate.match)
        self._serial += len(held.candidates)
        for at_port, claim, _ in held.claims:  # listeners' and defaultBackends' claims
            if at_port == number:
                add_claim(claims, claim, 1)
        port = Port(
            holding,
            wider_held,
            claims,
            hosts,
            {},
            [key_of[id(rule)] for rule in rules],
            list(rules),
            list(holding.closed),
            set(),
        )
        for host in clashing:
            if port.decided_as_is(host).losers:
                port.losing.add(host)
        return port

    def update(
        self,
        state: ClusterState,
        placement: Placement,
        services: Mapping[ServiceKey, Service],
        reuse: Memo,
        memo: Memo,
        last: tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]] | None = None,
        keys: RouteKeys | None = None,
    ) -> tuple[RouteTable, set[ServiceKey]] | None:
        """The table for `state` whose HTTPRoutes and GRPCRoutes alone changed since this
        index's table (`reuse`: its memo), and the Services whose demand moved; `memo`
        is filled as `build_table` fills it (`reuse` itself: changed in place, no copy of
        every route's entry, once the update is sure to be made). None: compute from
        scratch (nothing moved). `last`: the HTTPRoutes and GRPCRoutes `reuse` was made
        from, so the changed routes are found between their common ends; `keys`: the
        same by change key, so they are found from `state.changes` (`changed_routes`)."""
        if not self.usable:
            return None
        found = changed_routes(state, reuse, last, keys)
        if found is None:
            return None
        by_id, added, removed = found
        grants = by_namespace(state.reference_grants)
        new = [(by_id[i], route_outcome(by_id[i], placement, services, grants)) for i in added]
        old = [reuse[i] for i in removed]
        outcomes = [o for _, o in (*old, *new) if o is not None]
        if not self._covers(outcomes, old, new):
            return None
        if memo is not reuse:
            memo.update(reuse)
        for i in removed:
            del memo[i]
        for route, outcome in new:
            memo[id(route)] = (route, outcome)
        return self._apply(old, new, placement)

    def _covers(
        self,
        outcomes: list[RouteOutcome],
        old: list[tuple[HTTPRoute | GRPCRoute, RouteOutcome | None]],
        new: list[tuple[HTTPRoute | GRPCRoute, RouteOutcome | None]],
    ) -> bool:
        """Whether the change is one `_apply` computes as `build_table` would."""
        for done in outcomes:
            if done.persistence:
                return False
            if done.rejections and not done.workloads.issubset(self._workloads):
                return False
        # Each hostname touched: exact, on a port the workload listens on, none of its
        # claims refused before or after (so one namespace's, under no other namespace's
        # wildcard): what it serves and whether it is closed are its own.
        delta: dict[tuple[str, int, str], Counts] = {}
        for sign, pairs in ((-1, old), (1, new)):
            for _, outcome in pairs:
                if outcome is None:
                    continue
                for workload, candidates in outcome.candidates.items():
                    mine = self._workloads.get(workload)
                    if mine is None:
                        return False
                    for candidate in candidates:
                        port = mine.ports.get(candidate.port)
                        host = candidate.claim.host
                        if port is None or not exact_host(host):
                            return False
                        if candidate.port not in mine.held.defaults:
                            return False
                        counts = delta.setdefault((workload, candidate.port, host), {})
                        counts[candidate.claim] = counts.get(candidate.claim, 0) + sign
        for (workload, number, host), counts in delta.items():
            port = self._workloads[workload].ports[number]
            claims = port.claims.get(host) or {}
            after = dict(claims)
            for claim, step in counts.items():
                after[claim] = after.get(claim, 0) + step
            if refuses(host, claims, port.wider) or refuses(host, after, port.wider):
                return False
        return True

    def _apply(
        self,
        old: list[tuple[HTTPRoute | GRPCRoute, RouteOutcome | None]],
        new: list[tuple[HTTPRoute | GRPCRoute, RouteOutcome | None]],
        placement: Placement,
    ) -> tuple[RouteTable, set[ServiceKey]]:
        table = self.table
        # A persistent map: the last table's stays as it is (the status round and the
        # plan cache read it beside the new one), no copy of every route's outcome.
        routes = persistent(table.routes).mutate()
        touched: dict[tuple[str, int], set[str]] = {}
        moved: set[ServiceKey] = set()
        reported: set[str] = set()  # workloads whose routes' rejections changed
        h2_moved: set[ServiceKey] = set()
        rejecting = False
        for sign, pairs in ((-1, old), (1, new)):
            for route, outcome in pairs:
                key = (type(route).__name__, route.namespace, route.name)
                if sign < 0:
                    routes.pop(key, None)
                elif outcome is not None:
                    routes[key] = outcome
                if outcome is None:
                    continue
                if outcome.rejections:
                    rejecting = True
                    reported |= outcome.workloads
                    order = (route.namespace, route.name, key[0])
                    if sign < 0:
                        del self._rejecting[order], self._reported[order]
                    else:
                        self._rejecting[order] = tuple(outcome.rejections)
                        self._reported[order] = frozenset(outcome.workloads)
                moved |= self._count(outcome.demand, sign)
                if outcome.h2:
                    h2_moved |= _count_into(self._h2, outcome.h2, sign)
                for workload, candidates in outcome.candidates.items():
                    self._move(workload, candidates, sign, touched)
        self.changed = {key: frozenset(hosts) for key, hosts in touched.items()}
        workloads = dict(table.workloads)
        rejections = table.rejections
        rejoin: set[str] = set()  # workloads with lanes whose lanes' tables changed
        if rejecting:
            rejections = self._routes_rejections(rejections, reported, workloads, rejoin)
        for workload in sorted({w for w, _ in touched}):
            mine = self._workloads[workload]
            rejections = self._listeners(workload, mine, touched, workloads, rejections, rejoin)
        for workload in sorted(rejoin):
            workloads[workload] = self._joined(workload)
        demand = dict(table.demand)
        for service in moved:
            counts = self._demand.get(service)
            if not counts:
                demand.pop(service, None)
                self._demand.pop(service, None)
                continue
            found = frozenset(counts)
            if demand.get(service) != found:
                demand[service] = found
        h2_names = table.h2_names
        if h2_moved:
            h2_names = dict(h2_names)
            for service in h2_moved:
                backends = self._h2.get(service)
                if backends:
                    h2_names[service] = frozenset(backends)
                else:
                    h2_names.pop(service, None)
                    self._h2.pop(service, None)
        self.table = dataclasses.replace(
            table,
            placement=placement,
            routes=routes.finish(),
            workloads=workloads,
            demand=demand,
            rejections=rejections,
            h2_names=h2_names,
        )
        shifted = {s for s in moved if table.demand.get(s) != demand.get(s)}
        shifted.update(s for s in h2_moved if table.h2_names.get(s) != h2_names.get(s))
        return self.table, shifted

    def _move(
        self,
        workload: str,
        candidates: list[Candidate],
        sign: int,
        touched: dict[tuple[str, int], set[str]],
    ) -> None:
        """Take a route's candidates on `workload` out (sign -1) or put them in (1)."""
        mine = self._workloads[workload]
        for candidate in candidates:
            port = mine.ports[candidate.port]
            name = candidate.claim.host
            port.decided_as_is(name)  # as the table has it, before its candidates move
            add_claim(port.claims, candidate.claim, sign)
            found = port.hosts.get(name, [])
            if sign < 0:
                port.hosts[name] = [item for item in found if item[1] is not candidate]
            else:
                self._serial += 1
                port.hosts[name] = [*found, ((candidate.key, self._serial), candidate)]
            touched.setdefault((workload, candidate.port), set()).add(name)

    def _listeners(
        self,
        workload: str,
        mine: _Workload,
        touched: dict[tuple[str, int], set[str]],
        workloads: dict[str, WorkloadRoutes],
        rejections: tuple[RejectedInput, ...],
        rejoin: set[str],
    ) -> tuple[RejectedInput, ...]:
        """The workload's (or lane's) listeners with its touched hostnames decided again;
        the table's rejections with its conflicts replaced."""
        last = self._part(workload, workloads)
        for (at_workload, number), hosts in touched.items():
            if at_workload == workload:
                port = mine.ports[number]
                for name in hosts:
                    self._decide_host(port, name, mine)
        listeners = list(last.listeners)
        for index, listener in enumerate(last.listeners):
            decided_again = touched.get((workload, listener.port))
            if decided_again is not None:
                port = mine.ports[listener.port]
                # The hostnames decided again, each with its rules now (the encoder
                # regroups them alone: `EditedRules`).
                edited = {
                    name: tuple(rule for _, rule in decided.winners)
                    if (decided := port.decided.get(name)) is not None
                    else ()
                    for name in decided_again
                }
                rules = EditedRules.of(port.rules, listener.rules, edited)
                # Its certificates and PROXY protocol are its port's (`crtlist.apply`).
                listeners[index] = dataclasses.replace(
                    listener, rules=rules, closed_hosts=tuple(port.closed)
                )
        held = mine.held
        found = [
            rejection
            for number in sorted({*held.defaults, *mine.ports})
            if number in mine.ports
            for rejection in mine.ports[number].conflicts()
        ]
        conflicts = (*held.refusals, *found, *held.certificates)
        own = last.rejections[: mine.own]
        after = last.rejections[mine.own + len(mine.conflicts) :]
        told = (*own, *conflicts, *after)
        if workload in self._parts:  # a lane: its workload's names are the joined table's
            self._put(workload, WorkloadRoutes(tuple(listeners), told, last.certificates), rejoin)
        else:
            names = mine.names.sorted()
            workloads[workload] = WorkloadRoutes(tuple(listeners), told, last.certificates, names)
        if conflicts != mine.conflicts:
            shift = len(conflicts) - len(mine.conflicts)
            start = mine.at
            rejections = (
                *rejections[:start],
                *conflicts,
                *rejections[start + len(mine.conflicts) :],
            )
            # the workloads and lanes after it (the build lists them in key order; one
            # of no conflicts starts where the next one does)
            for key, other in self._workloads.items():
                if key > workload:
                    other.at += shift
            mine.conflicts = conflicts
        return rejections

    def _routes_rejections(
        self,
        rejections: tuple[RejectedInput, ...],
        reported: set[str],
        workloads: dict[str, WorkloadRoutes],
        rejoin: set[str],
    ) -> tuple[RejectedInput, ...]:
        """The routes' rejections in the table's and in the `reported` workloads', in
        route order, as the HTTPRoutes stage lists them (few routes have any: sorted
        here)."""
        order = sorted(self._rejecting)
        found = tuple(r for key in order for r in self._rejecting[key])
        start = self._routes_from
        before = self._routes_count
        rejections = (*rejections[:start], *found, *rejections[start + before :])
        shift = len(found) - before
        self._routes_count = len(found)
        for mine in self._workloads.values():
            mine.at += shift
        for workload in reported:
            mine = self._workloads[workload]
            last = self._part(workload, workloads)
            mine_found = tuple(
                r for key in order if workload in self._reported[key] for r in self._rejecting[key]
            )
            start = mine.held.routes_from
            told = (*last.rejections[:start], *mine_found, *last.rejections[start + mine.routes :])
            mine.own += len(mine_found) - mine.routes
            mine.routes = len(mine_found)
            replaced = dataclasses.replace(last, rejections=told)
            if workload in self._parts:
                self._put(workload, replaced, rejoin)
            else:
                workloads[workload] = replaced
        return rejections

    def _part(self, key: str, workloads: Mapping[str, WorkloadRoutes]) -> WorkloadRoutes:
        """The table of a workload or lane as the update has it so far: a lane's (or a
        workload's with lanes) before the join, else the workload's in `workloads`."""
        return self._parts[key] if key in self._parts else workloads[key]

    def _put(self, key: str, routes: WorkloadRoutes, rejoin: set[str]) -> None:
        """A lane's (or a workload's with lanes) new table: its workload's to join again."""
        self._parts[key] = routes
        rejoin.add(lane_workload(key)[0])

    def _joined(self, workload: str) -> WorkloadRoutes:
        """The table of a workload with lanes: its own and its lanes' joined as the
        build joins them (O(its listeners and rejections), not its rules), then what the
        table added after (`_after`); its names counted across them."""
        keys = self._lanes[workload]
        found = join_lanes([self._parts[key] for key in keys])
        names = self._workloads[keys[0]].names.sorted()
        told = (*found.rejections, *self._after[workload])
        return WorkloadRoutes(found.listeners, told, found.certificates, names)

    def _decide_host(self, port: Port, name: str, mine: _Workload) -> None:
        """Decide `name` again on `port`: its winners moved in the port's rules and their
        backends in `mine.names`; its losers, and whether it is closed."""
        for full, rule in port.decided[name].winners:
            at = bisect_left(port.keys, full)
            _count_names(mine, rule, -1)
            del port.keys[at]
            del port.rules[at]
        candidates = port.hosts.get(name, [])
        decided = port.decided[name] = decide(candidates, port.holding, {})
        for full, rule in decided.winners:
            at = bisect_left(port.keys, full)
            port.keys.insert(at, full)
            port.rules.insert(at, rule)
            _count_names(mine, rule, 1)
        if decided.losers:
            port.losing.add(name)
        else:
            port.losing.discard(name)
        if not candidates:
            port.hosts.pop(name, None)
            del port.decided[name]
        claims = port.claims.get(name)
        namespaces = claim_namespaces(claims)
        closed = bool(namespaces) and host_closed(port, name, next(iter(namespaces)))
        if not claims:
            port.claims.pop(name, None)
        at = bisect_left(port.closed, name)
        present = at < len(port.closed) and port.closed[at] == name
        if closed and not present:
            insort(port.closed, name)
        elif present and not closed:
            del port.closed[at]


def _count_into(
    counts: dict[ServiceKey, dict[str, int]], pairs: Iterable[tuple[ServiceKey, str]], step: int
) -> set[ServiceKey]:
    """Count (Service, name) pairs in or out of `counts`; the Services counted."""
    moved: set[ServiceKey] = set()
    for service, name in pairs:
        found = counts.get(service)
        if found is None:
            found = counts[service] = {}
        found[name] = found.get(name, 0) + step
        if not found[name]:
            del found[name]
        moved.add(service)
    return moved


def _count_names(mine: _Workload, rule: RouteRule, step: int) -> None:
    """Count `rule`'s backends in or out of the workload's names (sorted again only when
    a name comes or goes)."""
    names = mine.names
    counts = names.counts
    for backend in rule.backends:
        name = backend.backend
        if name not in counts:
            names.ordered = None
        counts[name] += step
        if not counts[name]:
            del counts[name]
            names.ordered = None
