"""An HTTPRoute rule's `timeouts` and `retry`, and the RequestMirror filter, in compute:
durations in the Gateway API's format to milliseconds, a bad value or a retry refusing its
rule alone (reported, the route's other rules served), a route left with no rule not
accepted (docs/annotations.md, "Rule `timeouts`", "Rule `retry`")."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.model import HTTPRouteRule, HTTPRouteTimeouts
from controlplane.routes.filters import timeouts
from controlplane.routes.filters.base import Refused
from controlplane.routes.status import route_statuses
from controlplane.snapshot import RouteTimeouts
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to
from tests.routes.test_route_status import parent
from tests.routes.test_routes import reasons, rules_of, snapshot_of, sources


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("0s", 0),
        ("500ms", 500),
        ("1s", 1000),
        ("1h30m", 5_400_000),
        ("1h1m1s1ms", 3_661_001),
        ("99999ms", 99_999),
        ("", None),
        ("1.5s", None),
        ("-1s", None),
        ("1d", None),
        ("100000s", None),  # six digits
        ("1h1m1s1ms1h", None),  # five components
        (" 1s", None),
        ("1S", None),
    ],
)
def test_a_gateway_api_duration_in_milliseconds(text: str, ms: int | None) -> None:
    assert timeouts.duration_ms(text) == ms


def translated(request: str | None = None, backend: str | None = None) -> object:
    return timeouts.translate(HTTPRouteRule(timeouts=HTTPRouteTimeouts(request, backend)))


@pytest.mark.parametrize(
    ("request_", "backend", "want", "server_ms"),
    [
        ("10s", "1500ms", RouteTimeouts(10_000, 1_500), 1_500),
        ("500ms", None, RouteTimeouts(500, None), 500),
        (None, "2s", RouteTimeouts(None, 2_000), 2_000),
        ("0s", None, RouteTimeouts(0, None), 0),  # disabled: no limit
        ("0s", "5s", RouteTimeouts(0, 5_000), 5_000),  # a disabled request bounds nothing
        ("1s", "0s", RouteTimeouts(1_000, 0), 1_000),
        ("1s", "1s", RouteTimeouts(1_000, 1_000), 1_000),
        ("596h", None, RouteTimeouts(2_145_600_000, None), 2_145_600_000),
    ],
)
def test_timeouts_give_the_backends_silence_limit(
    request_: str | None, backend: str | None, want: RouteTimeouts, server_ms: int
) -> None:
    got = translated(request_, backend)
    assert got == want
    assert isinstance(got, RouteTimeouts) and got.server_ms == server_ms


def test_no_timeout_set_is_no_part() -> None:
    assert timeouts.translate(HTTPRouteRule()) is None
    assert translated() is None


@pytest.mark.parametrize(
    ("request_", "backend", "reason"),
    [
        ("1s", "2s", "backendRequest 2s exceeds request 1s"),
        ("soon", None, "request soon is not a Gateway API duration (1h30m, 500ms)"),
        (None, "5", "backendRequest 5 is not a Gateway API duration (1h30m, 500ms)"),
        ("597h", None, "request 597h is longer than HAProxy's longest timeout (24d20h31m23s)"),
    ],
)
def test_a_timeout_peerplane_cannot_keep_is_refused(
    request_: str | None, backend: str | None, reason: str
) -> None:
    assert translated(request_, backend) == Refused(reason)


def routed(*rules: dict[str, Any]) -> Any:
    return snapshot_of(state(gateway(), route("r", list(rules))))


def test_a_refused_timeout_or_retry_drops_its_rule_alone() -> None:
    got = routed(
        prefix_rule("/ok", [to("shop")], timeouts={"request": "10s", "backendRequest": "1s"}),
        prefix_rule("/bad", [to("shop")], timeouts={"request": "1s", "backendRequest": "2s"}),
        prefix_rule("/retried", [to("shop")], retry={"codes": [500], "attempts": 3}),
        prefix_rule("/plain", [to("shop")]),
    )
    assert sources(got) == [  # the longer prefix first
        "HTTPRoute default/r rule 3 match 0",
        "HTTPRoute default/r rule 0 match 0",
    ]
    assert [r.filters for r in rules_of(got)] == [(), (RouteTimeouts(10_000, 1_000),)]
    assert reasons(got) == [
        "HTTPRoute default/r spec.rules[1].timeouts: backendRequest 2s exceeds request 1s;"
        " rule not served",
        "HTTPRoute default/r spec.rules[2].retry: retry not served: HAProxy sets retry-on and"
        " retries per backend, and a Service's backend is shared by every rule that sends to"
        " it; rule not served",
    ]


def test_a_request_mirror_drops_its_rule_with_the_reason() -> None:
    mirror = {
        "type": "RequestMirror",
        "requestMirror": {"backendRef": {"name": "shop", "port": 80}},
    }
    got = routed(prefix_rule("/m", [to("shop")], filters=[mirror]), prefix_rule("/", [to("shop")]))
    assert sources(got) == ["HTTPRoute default/r rule 1 match 0"]
    assert reasons(got) == [
        "HTTPRoute default/r spec.rules[0].filters[0]: RequestMirror not served: HAProxy"
        " mirrors requests only through an external SPOE agent (spoa-mirror), which peerplane"
        " does not run; rule not served"
    ]


@pytest.mark.parametrize(
    "extra",
    [
        {"filters": [{"type": "RequestMirror", "requestMirror": {}}]},
        {"retry": {"attempts": 2}},
        {"timeouts": {"request": "1x"}},
    ],
)
def test_a_route_whose_only_rule_is_refused_is_not_accepted(extra: dict[str, Any]) -> None:
    objects = state(gateway(), route("r", [prefix_rule("/", [to("shop")], **extra)]))
    assert parent(route_statuses(objects))["Accepted"] == ("False", "UnsupportedValue")


def test_a_route_with_a_dropped_rule_says_which_in_partially_invalid() -> None:
    """GEP-1364: Accepted stays True, and PartiallyInvalid (UnsupportedValue) names each
    dropped rule, its message starting "Dropped Rule"; gone once every rule is served."""
    rules = [
        prefix_rule("/ok", [to("shop")]),
        prefix_rule("/m", [to("shop")], filters=[{"type": "RequestMirror", "requestMirror": {}}]),
        prefix_rule("/t", [to("shop")], timeouts={"request": "1s", "backendRequest": "2s"}),
    ]
    (entry,) = [
        body["parents"][0]
        for key, body in route_statuses(state(gateway(), route("r", rules))).items()
        if key.kind == "HTTPRoute"
    ]
    by_type = {c["type"]: c for c in entry["conditions"]}
    assert (by_type["Accepted"]["status"], by_type["Accepted"]["reason"]) == ("True", "Accepted")
    partial = by_type["PartiallyInvalid"]
    assert (partial["status"], partial["reason"]) == ("True", "UnsupportedValue")
    assert partial["message"] == (
        "Dropped Rule 1 (spec.rules[1].filters[0]: RequestMirror not served: HAProxy mirrors"
        " requests only through an external SPOE agent (spoa-mirror), which peerplane does"
        " not run; rule not served); 2 (spec.rules[2].timeouts: backendRequest 2s exceeds"
        " request 1s; rule not served)"
    )
    served = state(gateway(), route("r", rules[:1]))
    assert "PartiallyInvalid" not in parent(route_statuses(served))
