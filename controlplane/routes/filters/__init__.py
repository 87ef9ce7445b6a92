"""An HTTPRoute rule's filters -> the snapshot's typed filters (`RouteFilter`).

One module per Gateway API filter type served, joined in `FILTERS`; a filter of any other
type, or one its translator refuses, drops the whole rule (reported) rather than serve it
without the filter. The first filter of a type is kept (docs/design.md, "Adding a route
filter").
"""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.model import HTTPRouteFilter, HTTPRouteMatch
from controlplane.routes.filters import (
    header_modifier,
    redirect,
    response_header_modifier,
    url_rewrite,
)
from controlplane.routes.filters.base import Refused, Translator
from controlplane.routes.precedence import Origin
from controlplane.snapshot import Redirect, RejectedInput, RouteFilter, URLRewrite

FILTERS: Mapping[str, Translator] = {
    "RequestHeaderModifier": header_modifier.translate,
    "RequestRedirect": redirect.translate,
    "ResponseHeaderModifier": response_header_modifier.translate,
    "URLRewrite": url_rewrite.translate,
}
"""The Gateway API filter type -> its translator."""


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
            result = Refused(f"filter type not served ({_served()} are)")
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
