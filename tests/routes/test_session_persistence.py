"""Session persistence (GEP-1619): a rule's sessionPersistence checked, one persistence
per backend (the oldest rule's), the Service's settings turning it into a cookie or a
header table, and a freed slot kept from reuse while a cookie may still name it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.compute import WorkloadSnapshot, compute
from controlplane.routes.persistence import duration_seconds
from controlplane.routes.status import route_statuses
from controlplane.snapshot import BackendSpec, SessionCookie, SessionHeader
from peerplane import session
from tests.helpers import tenants
from tests.helpers.builders import WORKLOAD, endpoint_slice, service
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to

COOKIE = {"sessionName": "shop-session", "type": "Cookie"}


def snapshot_of(*routes: Any, services: tuple[Any, ...] = ()) -> WorkloadSnapshot:
    return compute(state(gateway(), *routes, services=services), {}).workloads[WORKLOAD]


def backend(snapshot: WorkloadSnapshot, name: str) -> BackendSpec:
    return next(b for b in snapshot.backends if b.name == name)


def persisted(path: str, name: str, persistence: dict[str, Any]) -> dict[str, Any]:
    return prefix_rule(path, [to(name)], sessionPersistence=persistence)


def reasons(snapshot: WorkloadSnapshot) -> list[str]:
    return [f"{w.key}: {w.reason}" for w in snapshot.warnings]


def test_duration_is_read_as_the_crd_writes_it() -> None:
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("1500ms") == 2  # rounded up to HAProxy's seconds
    with pytest.raises(ValueError):
        duration_seconds("1d")


def test_session_cookie_is_idle_bounded_by_the_persistence_timeout() -> None:
    got = snapshot_of(route("r", [persisted("/", "shop", COOKIE)]))
    assert backend(got, "default_shop_http").session_cookie == SessionCookie(
        "shop-session", 0, 0, 1800
    )
    assert backend(got, "default_catalog_http").session_cookie is None
    assert reasons(got) == []


def test_permanent_cookie_has_its_lifetime_and_a_name_of_its_backend() -> None:
    permanent = {"absoluteTimeout": "2h", "cookieConfig": {"lifetimeType": "Permanent"}}
    got = snapshot_of(route("r", [persisted("/", "shop", permanent)]))
    cookie = backend(got, "default_shop_http").session_cookie
    assert cookie is not None and cookie.name.startswith("pp")
    assert (cookie.max_age_s, cookie.max_life_s, cookie.max_idle_s) == (7200, 7200, 0)


def test_header_persistence_is_a_table_of_the_service_settings() -> None:
    header = {"type": "Header", "sessionName": "X-Session"}
    got = snapshot_of(route("r", [persisted("/", "shop", header)]))
    assert backend(got, "default_shop_http").session_header == SessionHeader(
        "X-Session", 1 << 20, 1_800_000
    )


@pytest.mark.parametrize(
    ("persistence", "key", "reason"),
    [
        ({"type": "Header", "absoluteTimeout": "10m"}, "absoluteTimeout", "not served with type"),
        ({"sessionName": "a b"}, "sessionName", "not a cookie name"),
        (
            {"cookieConfig": {"lifetimeType": "Permanent"}},
            "absoluteTimeout",
            "a Permanent cookie needs",
        ),
        ({"absoluteTimeout": "99999h"}, "absoluteTimeout", "not between 1s and 30 days"),
    ],
)
def test_unserved_persistence_is_refused_alone(
    persistence: dict[str, Any], key: str, reason: str
) -> None:
    got = snapshot_of(route("r", [persisted("/", "shop", persistence)]))
    shop = backend(got, "default_shop_http")
    assert shop.session_cookie is None and shop.session_header is None
    assert got.http_listeners[0].rules, "the rule is served without persistence"
    [said] = reasons(got)
    assert said.startswith(f"spec.rules[0].sessionPersistence.{key}: {reason}"), said
    assert said.endswith("sessionPersistence not served")


def test_a_later_rule_asking_the_backend_for_another_persistence_is_refused() -> None:
    older = route("older", [persisted("/a", "shop", COOKIE)], created="2026-01-01T00:00:00Z")
    header = {"type": "Header", "sessionName": "X-Session"}
    newer = route("newer", [persisted("/b", "shop", header)], created="2026-02-01T00:00:00Z")
    same = route("same", [persisted("/c", "shop", COOKIE)], created="2026-03-01T00:00:00Z")
    for routes in ((older, newer, same), (same, newer, older)):  # input order does not matter
        got = snapshot_of(*routes)
        assert backend(got, "default_shop_http").session_cookie is not None
        assert backend(got, "default_shop_http").session_header is None
        [said] = [w for w in got.warnings if "already has session persistence" in w.reason]
        assert said.object == "HTTPRoute default/newer"
        assert "from the older HTTPRoute default/older rule 0" in said.reason


def test_header_persistence_beside_source_ip_persistence_is_refused_on_the_service() -> None:
    sticky = service("shop", annotations={"haproxy.org/source-ip-persistence": "true"})
    header = {"type": "Header", "sessionName": "X-Session"}
    got = snapshot_of(
        route("r", [persisted("/", "shop", header)]), services=(sticky, service("catalog"))
    )
    shop = backend(got, "default_shop_http")
    assert shop.persistence is not None and shop.session_header is None
    assert any("source-IP persistence holds" in w.reason for w in shop.warnings)


def test_a_freed_slot_waits_out_what_a_permanent_cookie_can_name() -> None:
    """The quarantine covers the cookie: a Permanent cookie of 2h keeps a freed slot from a
    new pod for 2h and the slack of HAProxy's cookie dates, though the Service has no stick
    table (no quarantine of its own)."""
    permanent = {"absoluteTimeout": "2h", "cookieConfig": {"lifetimeType": "Permanent"}}
    base = state(gateway(), route("r", [persisted("/", "shop", permanent)]))

    def at(now: float, *addresses: str, previous: Any) -> Any:
        cluster = dataclasses.replace(base, endpoint_slices=(endpoint_slice("shop", addresses),))
        return compute(cluster, previous, now=now)

    first = at(0, "10.0.0.1", previous={})
    assert first.assignment["default_shop_http"].slots == {("10.0.0.1", 8888): 1}
    gone = at(10, previous=first.assignment)  # 10.0.0.1 leaves SRV_1 at t=10
    full = 42  # every other slot taken, so only the freed one could be reused
    others = [f"10.0.1.{i}" for i in range(1, full)]
    quarantine = 7200 + session.COOKIE_DATE_SLACK_S
    before = at(10 + quarantine - 1, *others, "10.0.9.9", previous=gone.assignment)
    assert 1 not in before.assignment["default_shop_http"].slots.values()
    after = at(10 + quarantine, *others, "10.0.9.9", previous=gone.assignment)
    assert 1 in after.assignment["default_shop_http"].slots.values()


def test_a_route_with_session_persistence_is_accepted() -> None:
    """Upstream conformance's first assertion: the route is Accepted, its refs resolved."""
    statuses = route_statuses(state(gateway(), route("r", [persisted("/", "shop", COOKIE)])))
    (key,) = [key for key in statuses if key.kind == "HTTPRoute"]
    (entry,) = statuses[key]["parents"]
    found = {c["type"]: c["status"] for c in entry["conditions"]}
    assert found == {"Accepted": "True", "ResolvedRefs": "True"}


def test_a_route_whose_hostnames_another_namespace_holds_sets_no_persistence() -> None:
    """A route refused everywhere (hostname ownership) takes no part: it neither gives its
    backends a persistence nor stands before a younger route that is served."""
    stealing = route(
        "steal",
        [prefix_rule("/cart", [to("bsvc")], sessionPersistence=COOKIE)],
        namespace="tenant-b",
        hostnames=(tenants.HOST,),
        created=tenants.NEW,
        parent={"name": "bgw"},
    )
    gateway_b = tenants.tenant_gateway()[0]
    cluster = state(*tenants.victim(), gateway_b, stealing, services=tenants.SERVICES)
    got = compute(cluster, {}).workloads[WORKLOAD]
    assert backend(got, tenants.TENANT_BACKEND).session_cookie is None
