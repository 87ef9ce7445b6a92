"""A route filter has one home on each side: the checklist "Adding a route filter" in
docs/design.md names one existing file per step, and every filter is in every table it
names (translator, snapshot type, encoder, renderer, golden feature, reference). The rule
fields carried as filters (`RULE_FIELDS`: timeouts, retry) are held to the same tables."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml

from controlplane.model import (
    HeaderModifier,
    HTTPRouteFilter,
    HTTPRouteMatch,
    PathMatch,
    RequestRedirect,
    URLRewrite,
)
from controlplane.publish.encode_filters import FILTER_ENCODERS
from controlplane.routes.filters import FILTERS, RULE_FIELDS, UNSERVED, rule_filters
from controlplane.routes.filters.base import Refused
from controlplane.routes.precedence import Origin
from controlplane.snapshot import (
    HeaderChanges,
    PathRewrite,
    Redirect,
    RejectedInput,
    ResponseHeaderChanges,
    RouteFilter,
    RouteTimeouts,
)
from controlplane.snapshot import URLRewrite as Rewrite
from nodeagent.config.filters import RENDERERS
from peerplane.v1 import peerplane_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
# The RouteRule fields that are no filter: what a rule matches and where it sends.
NOT_FILTERS = {
    "source",
    "hostnames",
    "path",
    "method",
    "headers",
    "query_params",
    "backends",
    "single_label_wildcards",
}
# A part whose empty value encodes nothing: one that does.
SAMPLES: dict[type, Any] = {RouteTimeouts: RouteTimeouts(request_ms=500)}
ORIGIN = Origin("HTTPRoute", "default", "r", "spec.rules[0]")
ANY_PATH = (HTTPRouteMatch(),)


def checklist() -> list[str]:
    """The numbered steps of the design's "Adding a route filter"."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("\n## Adding a route filter\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. (.*(?:\n    .*)*)", section, re.M)


def source_file(item: Any) -> Path:
    return ROOT / (item.__module__.replace(".", "/") + ".py")


def translators() -> list[Any]:
    return [*FILTERS.values(), *RULE_FIELDS.values()]


def translator_modules() -> list[Path]:
    return [source_file(translate) for translate in translators()]


def renderer_modules() -> list[Path]:
    return [source_file(renderer.check) for renderer in RENDERERS]


def golden_filter_types() -> set[str]:
    """Every filter type, and every `RULE_FIELDS` field, an HTTPRoute rule of a golden
    feature's input uses."""
    found: set[str] = set()
    for path in GOLDEN.glob("*/input.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "HTTPRoute":
                for rule in document["spec"].get("rules", []):
                    found.update(f["type"] for f in rule.get("filters", []))
                    found.update(name for name in RULE_FIELDS if name in rule)
    return found


def test_the_checklist_names_one_existing_file_per_step() -> None:
    steps = checklist()
    assert len(steps) >= 8
    placeholders = {
        "controlplane/routes/filters/<filter>.py": translator_modules(),
        "nodeagent/config/filters/<filter>.py": renderer_modules(),
        "tests/golden/<feature>/input.yaml": sorted(GOLDEN.glob("*/input.yaml")),
    }
    named = []
    for step in steps:
        files = re.findall(r"`([\w./<>-]+\.(?:py|yaml|md|proto))`", step)
        assert len(files) == 1, step
        named += files
        for path in placeholders.get(files[0], [ROOT / files[0]]):
            assert path.is_file(), path
    assert set(placeholders) <= set(named)
    for path in ("controlplane/routes/filters/__init__.py", "nodeagent/config/filters/__init__.py"):
        assert path in named


def test_every_filter_type_has_a_translator_module_a_golden_feature_and_a_reference() -> None:
    assert all(path.parent == ROOT / "controlplane/routes/filters" for path in translator_modules())
    assert len(set(translator_modules())) == len(FILTERS) + len(RULE_FIELDS)
    assert set(FILTERS) <= golden_filter_types()
    reference = (ROOT / "docs" / "annotations.md").read_text()
    row = next(line for line in reference.splitlines() if line.startswith("| Filters |"))
    served, unserved = row.split("|")[2:4]
    for kind in FILTERS:
        assert f"`{kind}`" in served, kind
    for kind in UNSERVED:
        assert f"`{kind}`" in unserved, kind


def test_every_rule_field_has_a_golden_feature_and_a_row_of_the_reference() -> None:
    """A served rule field (one whose translator gives a part) is in a golden feature; each
    has its row ("| Rule `timeouts` |") saying what is served and what is not."""
    served = {n for n, t in RULE_FIELDS.items() if _returned(t)}
    assert served <= golden_filter_types()
    reference = (ROOT / "docs" / "annotations.md").read_text()
    for name in RULE_FIELDS:
        assert f"| Rule `{name}` |" in reference, name


def _returned(translate: Any) -> set[type]:
    hints = typing.get_type_hints(translate)
    return set(typing.get_args(hints["return"])) - {Refused, type(None)}


def test_every_snapshot_filter_has_a_translator_and_an_encoder() -> None:
    kinds = set(typing.get_args(RouteFilter))
    assert set().union(*(_returned(t) for t in translators())) == kinds
    assert set(FILTER_ENCODERS) == kinds


def test_every_filter_field_of_the_contract_has_one_renderer() -> None:
    fields = {r.field for r in RENDERERS}
    assert len(fields) == len(RENDERERS)
    assert all(path.parent == ROOT / "nodeagent/config/filters" for path in renderer_modules())
    assert set(pb.RouteRule.DESCRIPTOR.fields_by_name) - NOT_FILTERS == fields
    for kind, encode in FILTER_ENCODERS.items():
        message = pb.RouteRule()
        encode(SAMPLES.get(kind, kind()), message)
        assert [f.name for f, _ in message.ListFields()] in ([r.field] for r in RENDERERS), kind


def test_the_first_filter_of_a_type_is_kept_in_the_routes_order() -> None:
    first = HeaderModifier(set=(("x-a", "1"),))
    filters = (
        HTTPRouteFilter("RequestRedirect", request_redirect=RequestRedirect(scheme="https")),
        HTTPRouteFilter("RequestHeaderModifier", request_header_modifier=first),
        HTTPRouteFilter("RequestHeaderModifier", request_header_modifier=HeaderModifier()),
    )
    rejections: list[RejectedInput] = []
    got = rule_filters(filters, ANY_PATH, "spec.rules[0]", ORIGIN, rejections)
    assert got == (Redirect(scheme="https"), HeaderChanges(set=(("x-a", "1"),)))
    assert rejections == []


def test_a_filter_not_served_drops_the_rule_and_names_what_is_served() -> None:
    modifier = HTTPRouteFilter("RequestHeaderModifier", request_header_modifier=HeaderModifier())
    generic = (
        "filter type not served (RequestHeaderModifier, RequestRedirect,"
        " ResponseHeaderModifier and URLRewrite are); rule not served"
    )
    unserved = {
        HTTPRouteFilter("RequestMirror"): f"{UNSERVED['RequestMirror']}; rule not served",
        HTTPRouteFilter("RequestRedirect"): generic,  # its own field missing: not served
    }
    for item, reason in unserved.items():
        rejections: list[RejectedInput] = []
        assert rule_filters((modifier, item), ANY_PATH, "spec.rules[0]", ORIGIN, rejections) is None
        assert [(r.key, r.value, r.reason) for r in rejections] == [
            ("spec.rules[0].filters[1]", item.type, reason)
        ]


def _rewrite(path_type: str, value: str, hostname: str = "") -> HTTPRouteFilter:
    return HTTPRouteFilter("URLRewrite", url_rewrite=URLRewrite(hostname, path_type, value))


def _prefix(value: str) -> tuple[HTTPRouteMatch, ...]:
    return (HTTPRouteMatch(path=PathMatch("PathPrefix", value)),)


def test_url_rewrite_response_headers_and_redirect_paths_are_translated() -> None:
    rejections: list[RejectedInput] = []
    response = HeaderModifier(set=(("x-s", "1"),), add=(("x-a", "2"),), remove=("x-r",))
    filters = (
        _rewrite("ReplacePrefixMatch", "", "one.example.org"),
        HTTPRouteFilter("ResponseHeaderModifier", response_header_modifier=response),
    )
    got = rule_filters(filters, _prefix("/strip"), "spec.rules[0]", ORIGIN, rejections)
    assert got == (
        Rewrite("one.example.org", PathRewrite("ReplacePrefixMatch", "")),
        ResponseHeaderChanges((("x-s", "1"),), (("x-a", "2"),), ("x-r",)),
    )
    redirect = RequestRedirect(status_code=308, path_type="ReplacePrefixMatch", path_value="/n")
    got = rule_filters(
        (HTTPRouteFilter("RequestRedirect", request_redirect=redirect),),
        _prefix("/o"),
        "spec.rules[0]",
        ORIGIN,
        rejections,
    )
    assert got == (Redirect(status_code=308, replace_prefix_match="/n"),)
    assert rejections == []


def test_invalid_rewrites_and_redirects_drop_their_rule_with_the_reason() -> None:
    exact = (HTTPRouteMatch(path=PathMatch("Exact", "/a")),)
    two = (*_prefix("/a"), *_prefix("/b"))
    prefix_redirect = HTTPRouteFilter(
        "RequestRedirect",
        request_redirect=RequestRedirect(path_type="ReplacePrefixMatch", path_value="/n"),
    )
    cases: list[tuple[tuple[HTTPRouteFilter, ...], tuple[HTTPRouteMatch, ...], str]] = [
        (
            (_rewrite("ReplacePrefixMatch", "/n"),),
            exact,
            "replacePrefixMatch needs exactly one PathPrefix match",
        ),
        ((prefix_redirect,), two, "replacePrefixMatch needs exactly one PathPrefix match"),
        (
            (_rewrite("", "", "a.example"), prefix_redirect),
            _prefix("/a"),
            "a RequestRedirect and a URLRewrite cannot go together",
        ),
        ((_rewrite("ReplaceFullPath", "/x y"),), exact, "replaceFullPath is not a path"),
        ((_rewrite("", "", "Bad_Host"),), exact, "hostname is not a lower-case host name"),
        (
            (
                HTTPRouteFilter(
                    "RequestRedirect", request_redirect=RequestRedirect(status_code=304)
                ),
            ),
            exact,
            "status code 304 (301, 302, 303, 307, 308 only)",
        ),
        (
            (
                HTTPRouteFilter(
                    "ResponseHeaderModifier",
                    response_header_modifier=HeaderModifier(set=(("x a", "1"),)),
                ),
            ),
            exact,
            "a header name or value peerplane does not serve",
        ),
    ]
    for filters, matches, reason in cases:
        rejections: list[RejectedInput] = []
        assert rule_filters(filters, matches, "spec.rules[0]", ORIGIN, rejections) is None
        assert len(rejections) == 1 and rejections[0].reason.startswith(reason), (
            reason,
            rejections,
        )
        assert rejections[0].reason.endswith("; rule not served")
