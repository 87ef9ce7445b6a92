"""Hostile route strings: whatever an HTTPRoute or an Ingress holds (newlines, quotes,
spaces, `#`, braces, unicode, huge values) in hostnames, paths, header and query names and
values, methods and redirects, every string compute puts in the listeners matches the
shared patterns (peerplane/patterns.py), a clean route beside it is still served, and input
order never changes the result."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from controlplane.compute import compute
from controlplane.snapshot import (
    HeaderChanges,
    Redirect,
    ResponseHeaderChanges,
    URLRewrite,
    WorkloadSnapshot,
)
from controlplane.source.convert import ManifestError
from peerplane import names, patterns
from tests.helpers.builders import WORKLOAD, service
from tests.helpers.route_builders import gateway, ingress, prefix_rule, route, state, to

EVIL = st.sampled_from(
    ["\n", "/a\nb", "/a b", '/"', "/#", "/${x}", "/{a}", "/[a]", "\\", "*", "*.", "é", "", "/"]
)
text = st.one_of(
    EVIL, st.text(max_size=30), st.builds(lambda n: "/" + "a" * n, st.integers(1, 2000))
)


@st.composite
def hostile_rule(draw: st.DrawFn) -> dict[str, Any]:
    match: dict[str, Any] = {
        "path": {
            "type": draw(st.sampled_from(["Exact", "PathPrefix", "RegularExpression"])),
            "value": draw(text),
        },
        "headers": [{"name": draw(text), "value": draw(text)}],
        "queryParams": [{"name": draw(text), "value": draw(text)}],
        "method": draw(st.one_of(st.just("GET"), text)),
    }
    filters: list[dict[str, Any]] = [
        {
            "type": "RequestHeaderModifier",
            "requestHeaderModifier": {
                "set": [{"name": draw(text), "value": draw(text)}],
                "remove": [draw(text)],
            },
        }
    ]
    path_type = draw(st.sampled_from(["ReplaceFullPath", "ReplacePrefixMatch"]))
    field = "replaceFullPath" if path_type == "ReplaceFullPath" else "replacePrefixMatch"
    path = {"type": path_type, field: draw(text)}
    if draw(st.booleans()):
        filters = [
            {
                "type": "RequestRedirect",
                "requestRedirect": {
                    "scheme": draw(st.one_of(st.just("https"), text)),
                    "hostname": draw(text),
                    "statusCode": draw(st.sampled_from([301, 302, 303, 304, 307, 308])),
                    "path": path,
                },
            }
        ]
    else:
        filters += [
            {
                "type": "URLRewrite",
                "urlRewrite": {"hostname": draw(text), "path": path},
            },
            {
                "type": "ResponseHeaderModifier",
                "responseHeaderModifier": {
                    "add": [{"name": draw(text), "value": draw(text)}],
                    "remove": [draw(text)],
                },
            },
        ]
    return {
        "matches": [match],
        "filters": filters,
        "backendRefs": [to(draw(st.sampled_from(["shop", "x\ny"])))],
    }


def check_strings(snapshot: WorkloadSnapshot) -> None:
    for listener in snapshot.http_listeners:
        for rule in listener.rules:
            assert all(patterns.is_route_host(h) for h in rule.hostnames), rule
            assert rule.path is None or patterns.is_path(rule.path.value), rule
            assert not rule.method or patterns.is_method(rule.method), rule
            assert all(
                patterns.is_header_name(n) and patterns.is_header_value(v) for n, v in rule.headers
            )
            assert all(
                patterns.is_query_name(n) and patterns.is_query_value(v)
                for n, v in rule.query_params
            )
            changes = rule.filter(HeaderChanges)
            if changes is not None:
                pairs = (*changes.set, *changes.add)
                assert all(
                    patterns.is_header_name(n) and patterns.is_header_value(v) for n, v in pairs
                )
                assert all(patterns.is_header_name(n) for n in changes.remove)
            response = rule.filter(ResponseHeaderChanges)
            if response is not None:
                pairs = (*response.set, *response.add)
                assert all(
                    patterns.is_header_name(n) and patterns.is_header_value(v) for n, v in pairs
                )
                assert all(patterns.is_header_name(n) for n in response.remove)
            rewrite = rule.filter(URLRewrite)
            if rewrite is not None:
                assert not rewrite.hostname or names.is_host_name(rewrite.hostname)
                assert rewrite.path is None or patterns.is_prefix_replacement(rewrite.path.value)
                if rewrite.replaces_prefix:
                    assert rule.path is not None and rule.path.type == "PathPrefix"
            redirect = rule.filter(Redirect)
            if redirect is not None:
                if redirect.replace_prefix_match is not None:
                    assert patterns.is_prefix_replacement(redirect.replace_prefix_match)
                    assert rule.path is not None and rule.path.type == "PathPrefix"
                assert not redirect.scheme or redirect.scheme in patterns.REDIRECT_SCHEMES
                assert not redirect.hostname or names.is_host_name(redirect.hostname)
                assert redirect.status_code in patterns.REDIRECT_CODES
                assert not redirect.replace_full_path or patterns.is_path(
                    redirect.replace_full_path
                )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rules=st.lists(hostile_rule(), min_size=1, max_size=3),
    hostnames=st.lists(text, max_size=3),
    ingress_host=text,
    ingress_path=text,
    seed=st.integers(0, 1000),
)
def test_hostile_routes_yield_only_pattern_strings_and_the_clean_route_is_served(
    rules: list[dict[str, Any]],
    hostnames: list[str],
    ingress_host: str,
    ingress_path: str,
    seed: int,
) -> None:
    try:
        hostile = route("hostile", rules, hostnames=tuple(hostnames))
    except ManifestError:  # a shape the API server refuses too (an empty required name)
        assume(False)
    clean = route("clean", [prefix_rule("/clean", [to("shop")])], hostnames=("clean.example.com",))
    bad_ingress = ingress(
        "i",
        [
            {
                "host": ingress_host,
                "http": {
                    "paths": [
                        {
                            "path": ingress_path,
                            "pathType": "Prefix",
                            "backend": {"service": {"name": "shop", "port": {"number": 80}}},
                        }
                    ]
                },
            }
        ],
    )
    cluster_state = state(gateway(), hostile, clean, bad_ingress, services=(service("shop"),))
    got = compute(cluster_state, {})
    snapshot = got.workloads[WORKLOAD]
    check_strings(snapshot)
    port_8080 = [listener for listener in snapshot.http_listeners if listener.port == 8080]
    assert any(r.source == "HTTPRoute default/clean rule 0 match 0" for r in port_8080[0].rules)
    shuffled = list(cluster_state.http_routes)
    random.Random(seed).shuffle(shuffled)
    again = compute(dataclasses.replace(cluster_state, http_routes=tuple(shuffled)), {})
    assert again.workloads == got.workloads and again.rejections == got.rejections
