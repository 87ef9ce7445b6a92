"""The agent's route filters (nodeagent/config/filters): the one rule of which rules are
map entries, and each filter's lines in its renderer's order, a redirect ending them."""

from __future__ import annotations

import pytest

from nodeagent.config.errors import RenderError
from nodeagent.config.filters import check_filters, filter_lines, map_entry_ok
from nodeagent.config.filters.base import RuleOutcome
from peerplane import limits
from peerplane.v1 import peerplane_pb2 as pb

pytestmark = pytest.mark.unit  # pure

WON = "{ var(txn.r) -m str c0 }"


def plain(*backends: tuple[str, int]) -> pb.RouteRule:
    rule = pb.RouteRule(source="HTTPRoute ns/r rule 0", hostnames=["a.example.com"])
    rule.path.CopyFrom(pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value="/a"))
    for name, weight in backends or (("ns_a_80", 1),):
        rule.backends.add(backend=name, weight=weight)
    return rule


def test_a_host_and_path_rule_to_one_backend_is_a_map_entry() -> None:
    assert map_entry_ok(plain())
    assert map_entry_ok(plain(("ns_a_80", 3), ("ns_b_80", 0)))  # a weight of 0 never serves
    empty = plain()
    empty.request_headers.SetInParent()  # a header filter that changes nothing
    assert map_entry_ok(empty)


def test_a_match_a_filter_or_a_share_that_is_not_one_backend_is_config() -> None:
    changed = [
        pb.RouteRule(method="GET"),
        pb.RouteRule(headers=[pb.NameValue(name="x-a", value="1")]),
        pb.RouteRule(query_params=[pb.NameValue(name="q", value="1")]),
        pb.RouteRule(request_headers=pb.HeaderModifier(remove=["x-r"])),
        pb.RouteRule(redirect=pb.Redirect()),
        pb.RouteRule(timeouts=pb.Timeouts()),  # "0s" acts too: it lifts the backend's limit
    ]
    for change in changed:
        rule = plain()
        rule.MergeFrom(change)
        assert not map_entry_ok(rule), change
    assert not map_entry_ok(plain(("ns_a_80", 1), ("ns_b_80", 1)))
    assert not map_entry_ok(plain(("", 1)))  # unresolved: a 500
    assert not map_entry_ok(plain(("ns_a_80", 0)))  # none served: a 500


def test_header_lines_come_first_and_a_redirect_answers() -> None:
    rule = plain()
    rule.request_headers.set.add(name="x-s", value="1%")
    rule.request_headers.remove.append("x-r")
    rule.redirect.scheme = "https"
    lines, answered = filter_lines(rule, RuleOutcome(8080, "http", WON))
    assert answered
    assert lines == [
        f"  http-request set-header x-s 1%% if {WON}",
        f"  http-request del-header x-r if {WON}",
        f"  http-request redirect location https://%[var(txn.h)]%[pathq] code 302 if {WON}",
    ]
    rule.ClearField("redirect")
    assert filter_lines(rule, RuleOutcome(8080, "http", WON))[1] is False


def test_a_rules_timeout_sets_the_variable_its_backend_applies() -> None:
    """0 ("0s") is HAProxy's longest timeout; the backend section's line applies the
    variable (tests/agent/test_timeouts_haproxy.py on a real HAProxy)."""
    for ms, written in ((1500, 1500), (0, limits.MAX_TIMEOUT_MS)):
        rule = plain()
        rule.timeouts.server_timeout_ms = ms
        lines, answered = filter_lines(rule, RuleOutcome(8080, "http", WON))
        assert (lines, answered) == (
            [f"  http-request set-var(txn.tmo) int({written}) if {WON}"],
            False,
        )


def test_a_timeout_haproxy_cannot_hold_is_refused() -> None:
    rule = plain()
    rule.timeouts.server_timeout_ms = limits.MAX_TIMEOUT_MS
    check_filters(rule, "r")
    rule.timeouts.server_timeout_ms = limits.MAX_TIMEOUT_MS + 1
    with pytest.raises(RenderError, match="invalid server timeout: 2147483648"):
        check_filters(rule, "r")
