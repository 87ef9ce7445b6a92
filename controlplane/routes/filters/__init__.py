"""An HTTPRoute rule's filters -> the snapshot's typed filters (`RouteFilter`).

One module per Gateway API filter type served, joined in `FILTERS`; a filter of any other
type, or one its translator refuses, drops the whole rule (reported) rather than serve it
without the filter. The first filter of a type is kept (docs/design.md, "Adding a route
filter").
"""

from __future__ import annotations

from collections.abc import Mapping

from controlplane.model import HTTPRouteFilter
from controlplane.routes.filters import header_modifier, redirect
from controlplane.routes.filters.base import Refused, Translator
from controlplane.routes.precedence import Origin
from controlplane.snapshot import RejectedInput, RouteFilter

FILTERS: Mapping[str, Translator] = {
    "RequestHeaderModifier": header_modifier.translate,
    "RequestRedirect": redirect.translate,
}
"""The Gateway API filter type -> its translator."""


def _served() -> str:
    kinds = list(FILTERS)
    return " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)


def rule_filters(
    filters: tuple[HTTPRouteFilter, ...],
    where: str,
    origin: Origin,
    rejections: list[RejectedInput],
) -> tuple[RouteFilter, ...] | None:
    """The rule's filters, the first of each type; None (reported) when one is not served,
    so the rule is not served at all rather than served without it."""
    found: dict[type, RouteFilter] = {}
    for index, item in enumerate(filters):
        translate = FILTERS.get(item.type)
        result = translate(item) if translate is not None else None
        if result is None:
            result = Refused(f"filter type not served ({_served()} are)")
        if isinstance(result, Refused):
            rejections.append(
                origin.rejection(
                    item.type, f"{result.reason}; rule not served", f"{where}.filters[{index}]"
                )
            )
            return None
        found.setdefault(type(result), result)
    return tuple(found.values())
