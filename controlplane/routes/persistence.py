"""Session persistence (GEP-1619): an HTTPRoute rule's `sessionPersistence` checked, and
each backend's one persistence chosen among the rules that reach it.

HAProxy keeps cookie and stick-table persistence per backend, and a backend here is a
Service port, shared by every rule that routes to it. So a backend has at most one
session persistence: that of the oldest rule asking for one (route creation time, then
namespace, name and rule index, the Gateway API's tie-break). A later rule asking for a
different one is served without it and reported; one asking for the same shares it. A
rule without `sessionPersistence` reaching such a backend shares its persistence too
(docs/annotations.md, "Session persistence").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from controlplane.model import SessionPersistenceSpec
from controlplane.routes.backends import ServiceKey
from controlplane.routes.precedence import Origin
from controlplane.snapshot import RejectedInput, SessionPersistence
from peerplane import session

# The CRD's Duration: 1 to 4 groups of up to 5 digits and a unit.
_DURATION = re.compile(r"(?:[0-9]{1,5}(?:h|m|s|ms)){1,4}")
_PART = re.compile(r"([0-9]{1,5})(h|ms|m|s)")
_UNIT_MS = {"h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
NOT_SERVED = "sessionPersistence not served"


class _Refused(Exception):
    """A sessionPersistence peerplane does not serve: (key below it, value, reason)."""


def duration_seconds(text: str) -> int:
    """A Gateway API Duration in whole seconds, rounded up; ValueError if not one."""
    if _DURATION.fullmatch(text) is None:
        raise ValueError("not a Gateway API duration such as 1h30m")
    ms = sum(int(n) * _UNIT_MS[unit] for n, unit in _PART.findall(text))
    return -(-ms // 1000)


def _check(spec: SessionPersistenceSpec) -> SessionPersistence:
    if spec.type not in ("Cookie", "Header"):
        raise _Refused("type", spec.type, "only Cookie and Header are served")
    absolute = 0
    if spec.absolute_timeout:
        try:
            absolute = duration_seconds(spec.absolute_timeout)
        except ValueError as err:
            raise _Refused("absoluteTimeout", spec.absolute_timeout, str(err)) from None
        if not 0 < absolute <= session.MAX_LIFETIME_S:
            reason = (
                f"not between 1s and {session.MAX_LIFETIME_S // 86400} days (a freed slot "
                "waits out a cookie's lifetime before it is reused)"
            )
            raise _Refused("absoluteTimeout", spec.absolute_timeout, reason)
    if spec.type == "Header":
        if spec.lifetime_type:
            raise _Refused("cookieConfig", spec.lifetime_type, "cookieConfig is for type Cookie")
        if absolute:
            reason = (
                "not served with type Header: a stick-table entry expires after it was "
                "last used, not after an absolute time"
            )
            raise _Refused("absoluteTimeout", spec.absolute_timeout, reason)
        name = spec.session_name or session.DEFAULT_HEADER
        if session.HEADER_NAME.fullmatch(name) is None:
            raise _Refused("sessionName", name, "not a header name of letters, digits and -")
        return SessionPersistence("Header", name)
    if spec.lifetime_type not in ("", "Session", "Permanent"):
        raise _Refused("cookieConfig.lifetimeType", spec.lifetime_type, "not Session or Permanent")
    permanent = spec.lifetime_type == "Permanent"
    if permanent and not absolute:
        raise _Refused("absoluteTimeout", "", "a Permanent cookie needs an absoluteTimeout")
    if spec.session_name and not session.is_cookie_name(spec.session_name):
        reason = "not a cookie name of letters, digits, _ . - (128 at most)"
        raise _Refused("sessionName", spec.session_name, reason)
    return SessionPersistence("Cookie", spec.session_name, permanent, absolute)


def checked_persistence(
    spec: SessionPersistenceSpec | None,
    where: str,
    origin: Origin,
    rejections: list[RejectedInput],
) -> SessionPersistence | None:
    """The rule's persistence, or None (absent, or refused and reported: the rule is served
    without it)."""
    if spec is None:
        return None
    try:
        return _check(spec)
    except _Refused as refused:
        key, value, reason = refused.args
        rejections.append(
            origin.rejection(value, f"{reason}; {NOT_SERVED}", f"{where}.sessionPersistence.{key}")
        )
        return None


@dataclass(frozen=True, slots=True)
class PersistenceClaim:
    """One rule asking a backend for a persistence; `order` sorts the oldest rule first."""

    order: tuple[str, str, str, int]  # (route creation time, namespace, name, rule index)
    service: ServiceKey
    backend: str
    persistence: SessionPersistence
    origin: Origin

    @property
    def holder(self) -> str:
        return f"HTTPRoute {self.order[1]}/{self.order[2]} rule {self.order[3]}"


def describe(persistence: SessionPersistence) -> str:
    if persistence.type == "Header":
        return f"Header {persistence.name}"
    life = f"Permanent {persistence.absolute_s}s" if persistence.permanent else "Session"
    return f"Cookie {persistence.name or '(default name)'} {life}"


def backend_persistence(
    claims: Iterable[PersistenceClaim],
) -> tuple[dict[ServiceKey, dict[str, SessionPersistence]], list[RejectedInput]]:
    """Each backend's persistence (by Service, then backend name): the oldest claim's; a
    later claim asking for another is refused and reported on its route."""
    chosen: dict[str, PersistenceClaim] = {}
    rejections: list[RejectedInput] = []
    for claim in sorted(claims, key=lambda c: (c.order, c.backend)):
        held = chosen.get(claim.backend)
        if held is None:
            chosen[claim.backend] = claim
        elif held.persistence != claim.persistence:
            reason = (
                f"backend {claim.backend} already has session persistence "
                f"{describe(held.persistence)} from the older {held.holder}; {NOT_SERVED} "
                "for it"
            )
            rejections.append(claim.origin.rejection(describe(claim.persistence), reason))
    found: dict[ServiceKey, dict[str, SessionPersistence]] = {}
    for backend, claim in sorted(chosen.items()):
        found.setdefault(claim.service, {})[backend] = claim.persistence
    return found, rejections


Persisted = Mapping[ServiceKey, Mapping[str, SessionPersistence]]
