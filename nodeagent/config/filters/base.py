"""What one filter renderer is: how the agent checks, recognises and renders one filter of
a route rule (a field of the contract's RouteRule)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nodeagent.config.errors import RenderError
from peerplane.v1 import peerplane_pb2 as pb


@dataclass(frozen=True, slots=True)
class RuleOutcome:
    """Where a config rule's outcome is rendered: its listener's port, the scheme its
    clients came with (https where it terminates TLS), and the ACL of the rule having won."""

    port: int
    scheme: str
    won: str


@dataclass(frozen=True, slots=True)
class FilterRenderer:
    """One filter on the agent. `acts`: the rule carries it and it changes something (a
    rule with such a filter is never a map entry); `check` raises a RenderError for a value
    compute would never send; `lines` are the frontend's lines once the rule won; a filter
    that `answers` the request itself ends the rule's outcome (its backends unused).
    `refusals`: each string field of its message (dotted, below `field`) and the words of
    the RenderError that refuses a bad value of it (tests/agent/test_hostile_plane.py
    gives every string field a hostile value)."""

    field: str  # the RouteRule field that carries it
    acts: Callable[[pb.RouteRule], bool]
    check: Callable[[pb.RouteRule, str], None]
    lines: Callable[[pb.RouteRule, RuleOutcome], list[str]]
    refusals: Mapping[str, str]
    answers: bool = False


def refuse(what: str, value: object, source: str) -> RenderError:
    """A rule's value refused, as every rule check says it."""
    return RenderError(f"rule {source!r}: invalid {what}: {value!r}")


def log_format(value: str) -> str:
    """A checked value inside a log-format argument: only `%` means something there."""
    return value.replace("%", "%%")
