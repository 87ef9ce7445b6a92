"""An HTTPRoute rule's filters -> the snapshot's typed filters (`RouteFilter`).

One module per Gateway API filter type served, joined in `FILTERS`; a filter of any other
type, or one its translator refuses, drops the whole rule (reported) rather than serve it
without the filter. The first filter of a type is kept (docs/design.md, "Adding a route
filter"). The rule fields that act like filters (`timeouts`, `retry`) have a module each
too, joined in `RULE_FIELDS`, and are carried with the filters.
"""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.model import HTTPRouteFilter, HTTPRouteMatch, HTTPRouteRule
from controlplane.routes.filters import (
    header_modifier,
    redirect,
    response_header_modifier,
    retry,
    timeouts,
    url_rewrite,
)
from controlplane.routes.filters.base import Refused, RuleTranslator, Translator
from controlplane.routes.precedence import Origin
from controlplane.snapshot import Redirect, RejectedInput, RouteFilter, URLRewrite

FILTERS: Mapping[str, Translator] = {
    "RequestHeaderModifier": header_modifier.translate,
    "RequestRedirect": redirect.translate,
    "ResponseHeaderModifier": response_header_modifier.translate,
    "URLRewrite": url_rewrite.translate,
}
"""The Gateway API filter type -> its translator."""

UNSERVED: Mapping[str, str] = {
    "RequestMirror": "RequestMirror not served: HAProxy mirrors requests only through an"
    " external SPOE agent (spoa-mirror), which peerplane does not run",
}
"""Filter types peerplane knows and does not serve, with why (else: "not served")."""

RULE_FIELDS: Mapping[str, RuleTranslator] = {
    "timeouts": timeouts.translate,
    "retry": retry.translate,
}
"""The Gateway API rule field -> its translator (the rule to its part, carried with the
filters)."""


def _served() -> str:
    kinds = list(FILTERS)
    return " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)


def rule_filters(
    filters: tuple[HTTPRouteFilter, ...],
    matches: tuple[HTTPRouteMatch, ...],
    where: str,
    origin: Origin,
    rejections: list[RejectedInput],
) -> tuple[RouteFilter, ...] | None:
    """The rule's filters, the first of each type; None (reported) when one is not served
    or they cannot go together on the rule's matches, so the rule is not served at all
    rather than served without it."""
    found: dict[type, RouteFilter] = {}
    for index, item in enumerate(filters):
        translate = FILTERS.get(item.type)
        result = translate(item) if translate is not None else None
        if result is None:
            result = Refused(UNSERVED.get(item.type, f"filter type not served ({_served()} are)"))
        if not isinstance(result, Refused):
            result = _combined(result, found, matches)
        if isinstance(result, Refused):
            rejections.append(
                origin.rejection(
                    item.type, f"{result.reason}; rule not served", f"{where}.filters[{index}]"
                )
            )
            return None
        found.setdefault(type(result), result)
    return tuple(found.values())


def rule_parts(
    rule: HTTPRouteRule, where: str, origin: Origin, rejections: list[RejectedInput]
) -> tuple[RouteFilter, ...] | None:
    """The parts of the rule's fields in `RULE_FIELDS` that it sets; None (reported) when
    one is refused, so the rule is not served at all rather than served without it."""
    found: list[RouteFilter] = []
    for name, translate in RULE_FIELDS.items():
        result = translate(rule)
        if isinstance(result, Refused):
            rejections.append(
                origin.rejection(name, f"{result.reason}; rule not served", f"{where}.{name}")
            )
            return None
        if result is not None:
            found.append(result)
    return tuple(found)


def _combined(
    result: RouteFilter, found: Mapping[type, RouteFilter], matches: tuple[HTTPRouteMatch, ...]
) -> RouteFilter | Refused:
    """The Gateway API's rules across a rule's filters and matches (its CRD's validation,
    held here too): no redirect with a URLRewrite, and a ReplacePrefixMatch only on a rule
    of exactly one PathPrefix match (the prefix it replaces)."""
    kinds = {type(result), *found}
    if Redirect in kinds and URLRewrite in kinds:
        return Refused("a RequestRedirect and a URLRewrite cannot go together")
    replaces_prefix = isinstance(result, Redirect | URLRewrite) and result.replaces_prefix
    if replaces_prefix and (len(matches) != 1 or matches[0].path.type != "PathPrefix"):
        return Refused("replacePrefixMatch needs exactly one PathPrefix match")
    return result
