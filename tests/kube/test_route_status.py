"""The route status writer against the fake API server: each kind's status written to its
`/status`, transition times kept, nothing rewritten when unchanged, conflicts retried, a
missing or failing object never holding up the others, other controllers' route parents
kept, and only the Lease holder writing (two replicas)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
from kubernetes.client import CustomObjectsApi
from prometheus_client import CollectorRegistry

from controlplane.compute import compute
from controlplane.kube.leader import LeaderElector, LeaseTimings
from controlplane.kube.route_status import (
    DELIVERY_WAIT_S,
    FREEZE_MIN_COMPARED,
    GATEWAY_CONTROLLER,
    RouteStatusWriter,
    reporting_status,
    rfc3339,
)
from controlplane.kube.served_version import ServedVersion
from controlplane.metrics import Metrics
from controlplane.model import ClusterState
from controlplane.routes.status_round import Documents
from controlplane.snapshot import ComputeResult
from tests.helpers.waiting import wait_until
from tests.kubeapi import FakeKubeAPI
from tests.kubeapi.objects import (
    api_client,
    gateway,
    gateway_class,
    grpc_route,
    http_route,
    ingress,
    tcp_route,
    tls_route,
)

Obj = dict[str, Any]
GW = "gateway.networking.k8s.io"
T0 = 1_800_000_000.0


class Key(NamedTuple):
    group: str
    kind: str
    namespace: str
    name: str


CLASS = Key(GW, "GatewayClass", "", "peerplane")
GATEWAY = Key(GW, "Gateway", "default", "web")
ROUTE = Key(GW, "HTTPRoute", "default", "shop")
INGRESS = Key("networking.k8s.io", "Ingress", "default", "shop")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> Obj:
    return {
        "type": kind,
        "status": status,
        "reason": reason or kind,
        "message": message,
        "observedGeneration": 1,
    }


def parent(gateway_name: str = "web", controller: str = GATEWAY_CONTROLLER, **more: str) -> Obj:
    return {
        "parentRef": {"group": GW, "kind": "Gateway", "name": gateway_name},
        "controllerName": controller,
        "conditions": [condition("Accepted"), condition("ResolvedRefs", **more)],
    }


def documents(route_message: str = "") -> dict[Key, Obj]:
    return {
        CLASS: {"conditions": [condition("Accepted")]},
        GATEWAY: {
            "conditions": [condition("Accepted"), condition("Programmed")],
            "listeners": [
                {
                    "name": "http",
                    "attachedRoutes": 1,
                    "supportedKinds": [
                        {"group": GW, "kind": "HTTPRoute"},
                        {"group": GW, "kind": "GRPCRoute"},
                    ],
                    "conditions": [condition("Accepted"), condition("Programmed")],
                }
            ],
            "addresses": [{"type": "IPAddress", "value": "127.0.0.11"}],
        },
        ROUTE: {"parents": [parent(message=route_message)]},
        INGRESS: {"loadBalancer": {"ingress": [{"ip": "127.0.0.11"}]}},
    }


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    server = FakeKubeAPI().start()
    for obj in (gateway_class(), gateway(), http_route(), ingress()):
        server.apply(obj)
    yield server
    server.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(api: FakeKubeAPI, clock: Clock) -> Iterator[RouteStatusWriter]:
    w = RouteStatusWriter(api_client(api.url), clock=clock, recheck_s=0.05, retry_s=0.05)
    yield w
    w.close()


def stored(api: FakeKubeAPI, key: Key) -> Obj:
    obj = api.get(key.kind, key.namespace, key.name)
    assert obj is not None
    status: Obj = obj.get("status") or {}
    return status


def status_writes(api: FakeKubeAPI) -> list[str]:
    return [p for m, p in api.requests if m == "PUT" and p.endswith("/status")]


def without_times(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_times(v) for k, v in node.items() if k != "lastTransitionTime"}
    if isinstance(node, list):
        return [without_times(v) for v in node]
    return node


def test_each_kind_gets_its_status_with_transition_times(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    docs = documents()
    writer.submit(docs)
    assert writer.flush()
    for key, doc in docs.items():
        assert without_times(stored(api, key)) == doc, key
    accepted = stored(api, CLASS)["conditions"][0]
    assert accepted["lastTransitionTime"] == rfc3339(T0) == "2027-01-15T08:00:00Z"
    listener = stored(api, GATEWAY)["listeners"][0]
    assert {c["lastTransitionTime"] for c in listener["conditions"]} == {rfc3339(T0)}
    assert len(status_writes(api)) == 4
    assert api.get("Gateway", "default", "web")["metadata"]["generation"] == 1  # type: ignore[index]


def test_nothing_is_read_or_written_again_when_unchanged(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    writer.submit(documents())
    assert writer.flush()
    requests = len(api.requests)
    writer.submit(documents())  # equal documents, new objects
    assert writer.flush()
    assert len(api.requests) == requests  # cost follows the change: not even a read
    changed = documents(route_message="backend blog has no endpoints")
    writer.submit(changed)
    assert writer.flush()
    new = api.requests[requests:]
    assert [m for m, _ in new] == ["GET", "PUT"]
    assert new[1][1].endswith("/httproutes/shop/status")


def test_a_stored_status_already_equal_is_not_written(
    api: FakeKubeAPI, clock: Clock, writer: RouteStatusWriter
) -> None:
    """A new leader reads every object once; what already says the right thing stays."""
    writer.submit(documents())
    assert writer.flush()
    before = len(status_writes(api))
    fresh = RouteStatusWriter(api_client(api.url), clock=clock)
    try:
        clock.now += 60
        fresh.submit(documents())
        assert fresh.flush()
        assert fresh.stats.reads == 4 and fresh.stats.writes == 0
        assert len(status_writes(api)) == before
    finally:
        fresh.close()


def test_transition_time_moves_only_when_status_or_reason_does(
    api: FakeKubeAPI, clock: Clock, writer: RouteStatusWriter
) -> None:
    writer.submit(documents())
    assert writer.flush()
    clock.now = T0 + 100
    writer.submit(documents(route_message="a new message, same status and reason"))
    assert writer.flush()
    accepted, resolved = stored(api, ROUTE)["parents"][0]["conditions"]
    assert resolved["message"] == "a new message, same status and reason"
    assert resolved["lastTransitionTime"] == rfc3339(T0)
    clock.now = T0 + 200
    docs = documents()
    docs[ROUTE] = {"parents": [parent(status="False", reason="BackendNotFound")]}
    writer.submit(docs)
    assert writer.flush()
    accepted, resolved = stored(api, ROUTE)["parents"][0]["conditions"]
    assert (resolved["status"], resolved["reason"]) == ("False", "BackendNotFound")
    assert resolved["lastTransitionTime"] == rfc3339(T0 + 200)
    assert accepted["lastTransitionTime"] == rfc3339(T0)


def test_other_controllers_route_parents_are_kept(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    theirs = parent("their-gateway", controller="example.com/other")
    for c in theirs["conditions"]:
        c["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    route = api.get("HTTPRoute", "default", "shop")
    assert route is not None
    api.apply({**route, "status": {"parents": [theirs]}})
    writer.submit(documents())
    assert writer.flush()
    parents = stored(api, ROUTE)["parents"]
    assert [p["controllerName"] for p in parents] == ["example.com/other", GATEWAY_CONTROLLER]
    assert parents[0] == theirs
    # The route leaves our Gateways: our entries go, theirs stay.
    docs = documents()
    del docs[ROUTE]
    writer.submit(docs)
    assert writer.flush()
    assert stored(api, ROUTE)["parents"] == [theirs]


def test_a_conflict_is_retried_after_reading_again(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    api.fail_next("HTTPRoute", 409, count=2, match="/status", method="PUT")
    writer.submit(documents())
    assert writer.flush()
    assert writer.stats.conflicts == 2
    assert without_times(stored(api, ROUTE)) == documents()[ROUTE]
    reads = [p for m, p in api.requests if m == "GET" and "/httproutes/shop" in p]
    assert len(reads) == 3  # read, 409, read, 409, read, written


def test_a_missing_object_is_skipped_and_the_rest_written(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    docs = documents()
    docs[Key(GW, "HTTPRoute", "default", "gone")] = {"parents": [parent()]}
    writer.submit(docs)
    assert writer.flush()
    assert writer.stats.missing == 1 and writer.stats.failures == 0
    assert without_times(stored(api, ROUTE)) == docs[ROUTE]
    assert api.get("HTTPRoute", "default", "gone") is None


def test_a_failing_object_blocks_no_other_and_is_retried(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    api.fail_next("Gateway", 503, count=2, match="/status", method="PUT")
    writer.submit(documents())
    assert writer.flush()
    assert without_times(stored(api, ROUTE)) == documents()[ROUTE]
    assert without_times(stored(api, CLASS)) == documents()[CLASS]
    assert "Gateway default/web" in writer.stats.problems
    # Retried with backoff, without any new submission.
    wait_until(lambda: without_times(stored(api, GATEWAY)) == documents()[GATEWAY])
    wait_until(lambda: writer.stats.problems == {})


def test_a_document_the_api_refuses_blocks_no_other(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    docs = documents()
    docs[GATEWAY] = {"conditions": [condition(f"Type{i}") for i in range(9)]}  # CRD: at most 8
    writer.submit(docs)
    assert writer.flush()
    assert "HTTP 422" in writer.stats.problems["Gateway default/web"]
    assert without_times(stored(api, INGRESS)) == docs[INGRESS]
    assert stored(api, GATEWAY) == {}


TIMINGS = LeaseTimings(lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)


def test_only_the_lease_holder_writes(api: FakeKubeAPI, clock: Clock) -> None:
    electors = [
        LeaderElector(
            api_client(api.url),
            namespace="haproxy-system",
            name="peerplane-leader",
            identity=f"cp-{i}",
            timings=TIMINGS,
            on_started_leading=lambda: None,
            on_stopped_leading=lambda: None,
        )
        for i in range(2)
    ]
    writers = [
        RouteStatusWriter(
            api_client(api.url),
            leading=lambda e=e: e.is_leader,  # type: ignore[misc]
            clock=clock,
            recheck_s=0.05,
        )
        for e in electors
    ]
    try:
        for w in writers:
            w.submit(documents())  # computed by both replicas before any election
        assert all(w.flush() for w in writers)
        assert status_writes(api) == []  # nobody leads yet: nothing written
        for e in electors:
            e.start()
        wait_until(lambda: any(e.is_leader for e in electors))
        leader = next(i for i, e in enumerate(electors) if e.is_leader)
        follower = 1 - leader
        wait_until(lambda: len(status_writes(api)) == 4)
        # The writer counts a write after the API answered it: wait for the count too.
        wait_until(lambda: writers[leader].stats.writes == 4)
        changed = documents(route_message="changed")
        for w in writers:
            w.submit(changed)
        assert all(w.flush() for w in writers)
        assert without_times(stored(api, ROUTE)) == changed[ROUTE]
        assert writers[follower].stats.reads == writers[follower].stats.writes == 0
        # The leader goes; the follower takes the Lease, reads everything once and
        # writes what it computed since.
        electors[leader].stop()
        writers[leader].close()
        last = documents(route_message="after the handover")
        writers[follower].submit(last)
        wait_until(lambda: electors[follower].is_leader, timeout=5)
        wait_until(lambda: without_times(stored(api, ROUTE)) == last[ROUTE])
        assert writers[follower].stats.reads == 4 and writers[follower].stats.writes == 1
    finally:
        for e in electors:
            e.stop()
        for w in writers:
            w.close()


def test_documents_are_made_in_the_writer_thread_and_only_while_leading(
    api: FakeKubeAPI, clock: Clock
) -> None:
    """The compute loop only hands its result over; a follower never builds documents."""
    leading = threading.Event()
    made: list[str] = []

    def prepare(state: ClusterState, result: ComputeResult) -> Callable[[], dict[Key, Obj]]:
        def make() -> dict[Key, Obj]:
            made.append(threading.current_thread().name)
            return documents()

        return make

    writer = RouteStatusWriter(
        api_client(api.url), leading=leading.is_set, clock=clock, recheck_s=0.05
    )
    try:
        step = reporting_status(compute, writer, prepare)
        step(ClusterState(), {}, now=T0)
        step.published()
        assert writer.flush()
        assert made == [] and status_writes(api) == []
        leading.set()  # promoted: the latest result is made into documents and written
        wait_until(lambda: len(status_writes(api)) == 4)
        assert made == ["route-status"]
    finally:
        writer.close()


def test_documents_are_handed_to_the_writer_once_the_result_was_published(
    api: FakeKubeAPI, clock: Clock
) -> None:
    """Making the documents and writing them ran beside the encoding and the publication
    (the writer woken by the computation itself): a new route's publication came 20-30 ms
    later at 10,000 routes. The writer gets a result once the loop published it; a result
    never published is replaced by the next."""
    made: list[int] = []

    def prepare(state: ClusterState, result: ComputeResult) -> Callable[[], dict[Key, Obj]]:
        def make() -> dict[Key, Obj]:
            made.append(len(made))
            return documents()

        return make

    writer = RouteStatusWriter(api_client(api.url), clock=clock, recheck_s=0.05)
    try:
        step = reporting_status(compute, writer, prepare)
        step(ClusterState(), {}, now=T0)
        step(ClusterState(), {}, now=T0)  # the first never published: replaced
        assert writer.flush()
        assert made == [] and status_writes(api) == []
        step.published()
        wait_until(lambda: len(status_writes(api)) == 4)
        assert made == [0]
        step.published()  # nothing computed since: nothing handed over again
        assert writer.flush()
        assert made == [0]
    finally:
        writer.close()


def test_a_round_waits_until_the_agents_hold_the_publication(
    api: FakeKubeAPI, clock: Clock
) -> None:
    """The round's reads and writes (and a real API server's work on them, on the same
    cores) ran beside the agents' apply of the change they follow, the last stage of a
    route change: a round for a new submission starts once `delivered` says the agents
    hold it, or after its timeout."""
    held = threading.Event()
    asked: list[float] = []

    def delivered(timeout: float) -> bool:
        asked.append(timeout)
        return held.wait(timeout)

    writer = RouteStatusWriter(
        api_client(api.url), clock=clock, recheck_s=0.05, delivered=delivered
    )
    try:
        writer.submit(documents())
        wait_until(lambda: asked)
        assert not writer.flush(0.3)  # waiting for the agents: nothing read or written
        assert api.requests == []
        held.set()
        assert writer.flush()
        assert len(status_writes(api)) == 4
        assert asked == [DELIVERY_WAIT_S]
    finally:
        writer.close()


def test_each_outcome_is_counted_in_the_metrics(api: FakeKubeAPI, clock: Clock) -> None:
    metrics = Metrics(CollectorRegistry())
    writer = RouteStatusWriter(api_client(api.url), clock=clock, on_result=metrics.route_status)
    try:
        api.fail_next("Ingress", 409, match="/status", method="PUT")
        docs = documents()
        docs[Key(GW, "HTTPRoute", "default", "gone")] = {"parents": [parent()]}
        writer.submit(docs)
        assert writer.flush()
        writer.submit(docs)  # unchanged: not counted
        assert writer.flush()

        def count(result: str) -> float | None:
            return metrics.registry.get_sample_value(
                "peerplane_route_status_writes_total", {"result": result}
            )

        assert (count("written"), count("conflict"), count("missing")) == (4.0, 1.0, 1.0)
        assert count("failed") is None
    finally:
        writer.close()


def test_an_object_created_again_under_its_name_gets_its_status_anew(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    """Deleted and created again between two computations, the route's document is the
    same: the source's deletion makes the writer forget it, so it is written again."""
    writer.submit(documents())
    assert writer.flush()
    route = api.get("HTTPRoute", "default", "shop")
    assert route is not None
    api.delete("HTTPRoute", "default", "shop")
    api.apply(
        {k: v for k, v in route.items() if k != "status"}
        | {"metadata": {"name": "shop", "namespace": "default"}}
    )
    assert stored(api, ROUTE) == {}
    writer.submit(documents())  # unchanged documents: nothing to do, as far as it knows
    assert writer.flush()
    assert stored(api, ROUTE) == {}
    writer.forget("HTTPRoute", "default", "shop")  # what the source says on the deletion
    writer.submit(documents())
    assert writer.flush()
    assert without_times(stored(api, ROUTE)) == documents()[ROUTE]


def test_a_status_write_keeps_the_objects_labels_and_annotations(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    """The Ingress status update takes metadata from the body: the writer sends the object
    as read, so nothing but the status changes."""
    labelled = ingress()
    labelled["metadata"]["labels"] = {"team": "a"}
    labelled["metadata"]["annotations"] = {"example.com/owner": "team-a"}
    api.apply(labelled)
    writer.submit(documents())
    assert writer.flush()
    stored_ingress = api.get("Ingress", "default", "shop")
    assert stored_ingress is not None
    assert stored_ingress["metadata"]["labels"] == {"team": "a"}
    assert stored_ingress["metadata"]["annotations"] == {"example.com/owner": "team-a"}
    assert without_times(stored_ingress["status"]) == documents()[INGRESS]


def test_tlsroute_and_tcproute_statuses_go_to_their_status_subresources(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    """TLSRoute and TCPRoute (v1, the standard channel since Gateway API v1.5): parents
    written, other controllers' entries kept, ours removed when the route no longer names
    our Gateways."""
    tls, tcp = Key(GW, "TLSRoute", "default", "db"), Key(GW, "TCPRoute", "default", "pg")
    other = parent("theirs", controller="example.com/other")
    for c in other["conditions"]:
        c["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    api.apply({**tls_route(), "status": {"parents": [other]}})
    api.apply(tcp_route())
    writer.submit({tls: {"parents": [parent()]}, tcp: {"parents": [parent()]}})
    assert writer.flush()
    assert without_times(stored(api, tls)) == without_times({"parents": [other, parent()]})
    assert without_times(stored(api, tcp)) == {"parents": [parent()]}
    assert sorted(p for p in status_writes(api) if "routes/" in p and "http" not in p) == [
        f"/apis/{GW}/v1/namespaces/default/tcproutes/pg/status",
        f"/apis/{GW}/v1/namespaces/default/tlsroutes/db/status",
    ]
    writer.submit({})
    assert writer.flush()
    assert without_times(stored(api, tls)) == without_times({"parents": [other]})
    assert stored(api, tcp) == {"parents": []}


def test_grpcroute_status_goes_to_its_status_subresource(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    """A GRPCRoute's parents are written as an HTTPRoute's, to grpcroutes/status, other
    controllers' entries kept, ours removed when it no longer names our Gateways."""
    rpc = Key(GW, "GRPCRoute", "default", "rpc")
    other = parent("theirs", controller="example.com/other")
    for c in other["conditions"]:
        c["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    api.apply({**grpc_route(), "status": {"parents": [other]}})
    writer.submit({rpc: {"parents": [parent()]}})
    assert writer.flush()
    assert without_times(stored(api, rpc)) == without_times({"parents": [other, parent()]})
    assert [p for p in status_writes(api) if "grpcroutes" in p] == [
        f"/apis/{GW}/v1/namespaces/default/grpcroutes/rpc/status"
    ]
    writer.submit({})
    assert writer.flush()
    assert without_times(stored(api, rpc)) == without_times({"parents": [other]})


def test_an_older_experimental_install_gets_l4_route_status_at_v1alpha2(
    api: FakeKubeAPI, clock: Clock
) -> None:
    """Before Gateway API v1.5 TLSRoute and TCPRoute were served at v1alpha2 only: the
    writer writes at the version the source's `ServedVersion` found by listing."""
    api.serve_at("TLSRoute", "v1alpha2")
    api.apply({**tls_route(), "apiVersion": f"{GW}/v1alpha2"})
    client_ = api_client(api.url)
    served = ServedVersion(CustomObjectsApi(client_), "tlsroutes")
    assert served(_preload_content=False).status == 200
    assert served.version == "v1alpha2"
    w = RouteStatusWriter(
        client_, clock=clock, recheck_s=0.05, retry_s=0.05, served_versions={"TLSRoute": served}
    )
    try:
        tls = Key(GW, "TLSRoute", "default", "db")
        w.submit({tls: {"parents": [parent()]}})
        assert w.flush()
        assert without_times(stored(api, tls)) == {"parents": [parent()]}
        assert [p for p in status_writes(api) if "tlsroutes" in p] == [
            f"/apis/{GW}/v1alpha2/namespaces/default/tlsroutes/db/status"
        ]
    finally:
        w.close()


def _told(docs: dict[Key, Obj], serial: int, since: int | None, changed: set[Key]) -> Any:
    """Documents that say what changed since the ones numbered `since` (`StatusRound`'s)."""
    return Documents(docs, serial, since, frozenset(changed))  # type: ignore[arg-type]


def test_documents_that_say_what_changed_are_compared_for_those_alone(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    """The writer's round follows the change: it looks only at the keys the documents
    name as changed since the ones it made true last; any other documents, all keys."""
    writer.submit(_told(documents(), 1, None, set()))  # no previous: all compared
    assert writer.flush()
    assert writer.compared == 4 and len(status_writes(api)) == 4
    changed = documents(route_message="backend blog has no endpoints")
    writer.submit(_told(changed, 2, 1, {ROUTE}))
    assert writer.flush()
    assert writer.compared == 1
    assert without_times(stored(api, ROUTE)) == changed[ROUTE]
    gone = {k: v for k, v in changed.items() if k != ROUTE}
    writer.submit(_told(gone, 3, 2, {ROUTE}))  # the route no longer attached: parents go
    assert writer.flush()
    assert writer.compared == 1 and stored(api, ROUTE)["parents"] == []
    writer.submit(_told(documents(), 4, 99, {ROUTE}))  # not following the last: all
    assert writer.flush()
    assert writer.compared == 4
    assert without_times(stored(api, ROUTE)) == documents()[ROUTE]


def test_a_failed_write_is_retried_though_the_next_documents_do_not_name_it(
    api: FakeKubeAPI, writer: RouteStatusWriter
) -> None:
    writer.submit(_told(documents(), 1, None, set()))
    assert writer.flush()
    api.fail_next("Gateway", 503, count=1, match="/status", method="PUT")
    second = documents()
    second[GATEWAY] = {**second[GATEWAY], "addresses": []}
    writer.submit(_told(second, 2, 1, {GATEWAY}))
    assert writer.flush()
    assert "Gateway default/web" in writer.stats.problems
    third = {**second, ROUTE: documents(route_message="changed")[ROUTE]}
    writer.submit(_told(third, 3, 2, {ROUTE}))
    assert writer.flush()
    wait_until(lambda: stored(api, GATEWAY)["addresses"] == [])
    assert without_times(stored(api, ROUTE)) == third[ROUTE]
    wait_until(lambda: writer.stats.problems == {})


class _Accepting(RouteStatusWriter):
    """Every object already says its document: a round of thousands of documents in
    process, without the API's time."""

    def _ensure(self, key: Any, desired: Any) -> None:
        return None


def test_what_a_large_round_keeps_leaves_the_collectors_reach(api: FakeKubeAPI) -> None:
    """The first round after start keeps thousands of documents, made in the writer's
    thread after the loop froze its heap: left to the cyclic collector, its full
    collections (0.1-0.5 s at 3,000-10,000 routes) landed on the first route changes. A
    large round freezes them; a small one leaves the heap alone."""
    routes = 3 * FREEZE_MIN_COMPARED
    made: dict[Key, Obj] = {}

    def statuses() -> dict[Key, Obj]:
        for n in range(routes):
            made[Key(GW, "HTTPRoute", "default", f"route-{n}")] = {"parents": [parent()]}
        return made

    gc.unfreeze()
    writer = _Accepting(api_client(api.url), recheck_s=0.05)
    try:
        writer.submit_later(lambda: _told(statuses(), 1, None, set()))
        assert writer.flush() and writer.compared == routes
        tracked = {id(obj) for obj in gc.get_objects()}  # generations 0-2, not the frozen
        assert not [key for key, doc in made.items() if id(doc) in tracked]
        frozen = gc.get_freeze_count()
        assert frozen >= routes
        first = next(iter(made))
        changed = {**made, first: {"parents": []}}
        writer.submit(_told(changed, 2, 1, {first}))
        assert writer.flush() and writer.compared == 1
        assert gc.get_freeze_count() <= frozen  # a small round freezes nothing more
        assert id(changed[first]) in {id(obj) for obj in gc.get_objects()}
    finally:
        writer.close()
        gc.unfreeze()
