"""Spare backends: the pool in every snapshot, a new Service's claim, and what keeps it
(docs/design.md, "Spare backends")."""

from __future__ import annotations

import dataclasses

from controlplane.compute import Computer, compute
from controlplane.compute.spares import refusal, template
from controlplane.ledger.codec import assignment_from_json, assignment_to_json
from controlplane.model import ClusterState
from controlplane.publish import encode_one
from controlplane.settings.resolver import Resolver
from controlplane.snapshot import BackendSlots, SessionCookie, SessionHeader, WorkloadSnapshot
from nodeagent.config.render import RenderOptions, render
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    service,
    settings,
)
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to

POOL = settings(**{"spare-backends": "3", "server-slots": "4"})


def shop_state(*names: str, config=POOL, annotations=None, endpoints=("10.0.0.1",)):  # type: ignore[no-untyped-def]
    services = [service(name, annotations=annotations) for name in names]
    slices = [endpoint_slice(name, endpoints) for name in names]
    return cluster(services=services, slices=slices, pods=DEFAULT_PODS, config=config)


def spares_of(snapshot: WorkloadSnapshot) -> list[str]:
    return [spec.name for spec in snapshot.backends if spec.spare]


def test_every_snapshot_declares_the_pool_with_the_default_settings() -> None:
    result = compute(shop_state(), {})
    snapshot = result.workloads[WORKLOAD]
    assert spares_of(snapshot) == ["spare.1", "spare.2", "spare.3"]
    spare = snapshot.backend("spare.1")
    assert (spare.service, spare.mode, spare.slots.count, spare.slots.slots) == ("", "http", 4, {})
    assert refusal(spare, template(Resolver(POOL))) == ""
    assert result.assignment == {}  # an unclaimed spare is nobody's slots


def test_no_pool_when_the_setting_is_zero_or_unset() -> None:
    for config in (None, settings(**{"spare-backends": "0"})):
        result = compute(shop_state("shop", config=config), {})
        assert spares_of(result.workloads[WORKLOAD]) == []
        assert (
            result.workloads[WORKLOAD].backend("default_shop_http").section == "default_shop_http"
        )


def test_a_new_service_claims_the_lowest_spare_and_the_pool_is_refilled_above() -> None:
    first = compute(shop_state(), {})
    result = compute(shop_state("shop"), first.assignment)
    snapshot = result.workloads[WORKLOAD]
    shop = snapshot.backend("default_shop_http")
    assert shop.section == "spare.1" and result.assignment["default_shop_http"].spare == "spare.1"
    assert spares_of(snapshot) == ["spare.2", "spare.3", "spare.4"]
    assert result.spares_claimed == {"default_shop_http": "spare.1"}
    encoded = encode_one(snapshot).message()
    (wire,) = [b for b in encoded.backends if b.name == "default_shop_http"]
    assert (wire.section, wire.spare) == ("spare.1", False)
    assert [b.spare for b in encoded.backends if b.name.startswith("spare.")] == [True] * 3


def test_the_routes_name_the_spare_section() -> None:
    """HTTPRoutes and the Service's own hosts route to the section HAProxy knows."""
    objects = (gateway(), route("r", [prefix_rule("/", [to("shop")])], hostnames=("a.example",)))
    base = state(
        *objects, services=(service("shop", annotations={"haproxy.org/hosts": "s.example"}),)
    )
    base = dataclasses.replace(
        base, settings=POOL, endpoint_slices=(endpoint_slice("shop", ["10.0.0.1"]),)
    )
    snapshot = compute(base, {}).workloads[WORKLOAD]
    (listener,) = [lst for lst in snapshot.http_listeners if lst.rules]
    assert [b.backend for rule in listener.rules for b in rule.backends] == ["spare.1"]
    assert snapshot.http_frontend is not None
    assert [r.backend for r in snapshot.http_frontend.routes] == ["spare.1"]


def test_the_claim_is_kept_for_the_backends_life_through_the_ledger() -> None:
    """Later computations, a fresh one from the persisted ledger (a restart) and the
    incremental one agree, and an endpoint change keeps the section."""
    claimed = compute(shop_state("shop"), {}).assignment
    stored, errors = assignment_from_json(assignment_to_json(claimed), now=0.0)
    assert not errors and stored["default_shop_http"].spare == "spare.1"
    grown = shop_state("shop", endpoints=("10.0.0.1", "10.0.0.2"))
    fresh = compute(grown, stored)
    computer = Computer()
    computer.compute(shop_state("shop"), {})
    again = computer.compute(grown, claimed)
    assert fresh.workloads[WORKLOAD] == again.workloads[WORKLOAD]
    assert fresh.workloads[WORKLOAD].backend("default_shop_http").section == "spare.1"
    assert spares_of(fresh.workloads[WORKLOAD]) == ["spare.2", "spare.3", "spare.4"]


def test_a_backend_with_history_never_claims() -> None:
    """Turning the pool on does not move existing Services: their stick tables stay."""
    before = compute(shop_state("shop", config=None), {}).assignment
    result = compute(shop_state("shop"), before)
    assert result.workloads[WORKLOAD].backend("default_shop_http").section == "default_shop_http"
    assert result.spares_claimed == {}


def test_settings_no_spare_holds_are_refused_and_said() -> None:
    cases = {
        "source": ({"haproxy.org/load-balance": "source"}, ("10.0.0.1",)),
        "persistence": ({"haproxy.org/source-ip-persistence": "true"}, ("10.0.0.1",)),
        "check": ({"haproxy.org/check-http": "/healthz"}, ("10.0.0.1",)),
        "slots": ({}, tuple(f"10.0.0.{i}" for i in range(1, 6))),
    }
    for reason, (notes, endpoints) in cases.items():
        result = compute(shop_state("shop", annotations=notes, endpoints=endpoints), {})
        shop = result.workloads[WORKLOAD].backend("default_shop_http")
        assert shop.section == "default_shop_http", reason
        assert reason.split()[0] in result.spares_refused["default_shop_http"], reason
        assert spares_of(result.workloads[WORKLOAD]) == ["spare.1", "spare.2", "spare.3"]


def test_one_computation_claims_no_more_than_the_pool() -> None:
    result = compute(shop_state("a", "b", "c", "d", "e"), {})
    sections = {spec.name: spec.section for spec in result.workloads[WORKLOAD].backends}
    assert sections["default_a_http"] == "spare.1"
    assert sections["default_b_http"] == "spare.2"
    assert sections["default_c_http"] == "spare.3"
    assert sections["default_d_http"] == "default_d_http"
    assert "more new Services" in result.spares_refused["default_e_http"]


def test_a_follower_never_claims_and_serves_the_leaders_claim() -> None:
    leader = compute(shop_state("shop"), {}).assignment
    waiting = compute(shop_state("shop"), {}, assign_new=False)
    assert waiting.workloads[WORKLOAD].backend("default_shop_http").section == "default_shop_http"
    follower = compute(shop_state("shop"), leader, assign_new=False)
    assert follower.workloads[WORKLOAD] == compute(shop_state("shop"), leader).workloads[WORKLOAD]


def test_a_retired_backend_keeps_its_spare_until_its_quarantine_ends() -> None:
    """Its stick-table entries may still name the section's slots: the name is not given
    to the pool (nor to another Service) before they expire; a Service re-created in time
    continues in it."""
    computer = Computer()
    claimed = computer.compute(shop_state("shop"), {}, now=100.0).assignment
    gone = computer.compute(shop_state(), claimed, now=200.0)
    assert gone.assignment["default_shop_http"].spare == "spare.1"
    assert spares_of(gone.workloads[WORKLOAD]) == ["spare.2", "spare.3", "spare.4"]
    back = computer.compute(shop_state("shop"), gone.assignment, now=300.0)
    assert back.workloads[WORKLOAD].backend("default_shop_http").section == "spare.1"
    gone = computer.compute(shop_state(), back.assignment, now=400.0)
    lapsed = computer.compute(shop_state(), gone.assignment, now=400.0 + 1800.0)
    assert "default_shop_http" not in lapsed.assignment
    assert spares_of(lapsed.workloads[WORKLOAD]) == ["spare.1", "spare.2", "spare.3"]
    fresh = compute(shop_state(), gone.assignment, now=400.0 + 1800.0)
    assert fresh.workloads[WORKLOAD] == lapsed.workloads[WORKLOAD]


def test_a_bad_spare_in_the_ledger_drops_that_backend() -> None:
    document = assignment_to_json({"x_y_z": BackendSlots(count=1, spare="spare.1")})
    document["backends"]["x_y_z"]["spare"] = "default_shop_http"
    assignment, errors = assignment_from_json(document, now=0.0)
    assert assignment == {} and "bad spare" in errors[0]


def test_a_renamed_rule_stays_the_same_object_while_it_and_its_section_do() -> None:
    """The encoder keeps a rule's bytes by identity: a route added elsewhere must not make
    every rule naming a spare new again (O(changed) bytes, not O(rules))."""
    computer = Computer()
    made = {
        n: route(n, [prefix_rule("/", [to("shop")])], hostnames=(f"{n}.example",)) for n in "ab"
    }
    web, shop = gateway(), service("shop")

    def one(*names: str) -> ClusterState:
        base = state(web, *(made[n] for n in names), services=(shop,))
        return dataclasses.replace(
            base, settings=POOL, endpoint_slices=(endpoint_slice("shop", ["10.0.0.1"]),)
        )

    first = computer.compute(one("a"), {})
    (rule,) = [r for lst in first.workloads[WORKLOAD].http_listeners for r in lst.rules]
    assert rule.backends[0].backend == "spare.1"
    second = computer.compute(one("a", "b"), first.assignment)
    rules = [r for lst in second.workloads[WORKLOAD].http_listeners for r in lst.rules]
    assert any(r is rule for r in rules)
    assert {r.backends[0].backend for r in rules} == {"spare.1"}


def test_a_follower_declares_the_leaders_pool_while_a_claimed_backend_is_retired() -> None:
    """A follower keeps no retired backends of its own: its pool comes from the ledger,
    so its content is the leader's (docs/design.md, "Slots", followers)."""
    leader = Computer()
    claimed = leader.compute(shop_state("shop"), {}, now=100.0).assignment
    gone = leader.compute(shop_state(), claimed, now=200.0)
    follower = compute(shop_state(), gone.assignment, now=200.0, assign_new=False)
    assert spares_of(follower.workloads[WORKLOAD]) == ["spare.2", "spare.3", "spare.4"]
    assert follower.workloads[WORKLOAD] == gone.workloads[WORKLOAD]


def test_a_claimed_backend_turned_to_tcp_keeps_its_section_and_its_frontend_names_it() -> None:
    """Its record keeps the spare (its stick table is there): the TCP frontend names the
    section, as the agent requires of every reference."""
    claimed = compute(shop_state("shop"), {}).assignment
    tcp = shop_state("shop", annotations={"haproxy.org/tcp-port": "9000"})
    snapshot = compute(tcp, claimed).workloads[WORKLOAD]
    assert snapshot.backend("default_shop_http").section == "spare.1"
    assert [f.backend for f in snapshot.tcp_frontends] == ["spare.1"]
    encoded = encode_one(snapshot).message(1)
    render(encoded, RenderOptions(pod_name="haproxy-a"))  # no RenderError


def test_a_backend_protocol_or_session_persistence_is_no_spare_s() -> None:
    """A spare speaks HTTP/1.1 and has no session cookie or header table: a backend that
    needs one of those gets a section of its own (a reload), never a spare without it."""
    spare = template(Resolver(POOL))
    plain = compute(shop_state("shop"), {}).workloads[WORKLOAD].backend("default_shop_http")
    assert refusal(plain, spare) == ""
    h2 = dataclasses.replace(plain, protocol="h2")
    assert refusal(h2, spare) == "protocol h2 (spares speak HTTP/1.1)"
    cookie = SessionCookie(name="s", max_age_s=0, max_life_s=0, max_idle_s=1800)
    for persisted in (
        dataclasses.replace(plain, session_cookie=cookie),
        dataclasses.replace(plain, session_header=SessionHeader("X-Session", 1000, 60_000)),
    ):
        assert refusal(persisted, spare) == "session persistence (spares have none)"
