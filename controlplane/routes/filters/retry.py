"""An HTTPRoute rule's `retry` (GEP-1731, experimental channel): refused, with the reason.

HAProxy retries a request on a response status only through `retry-on` and `retries`,
which are settings of a backend section (no `http-request` action sets them on 2.6 or
3.0; 3.2's `set-retries` sets the count in a backend only, never the codes). A Service is
one backend, shared by every rule that sends to it, so one rule's codes and attempts
would become every other rule's: the Gateway API's own conformance test gives two rules
on one Service different codes and attempts. Served wrongly is worse than not served, so
a rule with a retry is not served (docs/annotations.md).
"""

from __future__ import annotations

from controlplane.model import HTTPRouteRule
from controlplane.routes.filters.base import Refused

REASON = (
    "retry not served: HAProxy sets retry-on and retries per backend, and a Service's"
    " backend is shared by every rule that sends to it"
)


def translate(rule: HTTPRouteRule) -> Refused | None:
    """Refused when the rule sets a retry; None when it does not."""
    return None if rule.retry is None else Refused(REASON)
