"""The snapshot's route filters -> their fields of the contract's RouteRule: one encoder
per filter type, joined in `FILTER_ENCODERS` (docs/design.md, "Adding a route filter")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controlplane.snapshot import HeaderChanges, Redirect, RouteFilter, RouteTimeouts
from peerplane.v1 import peerplane_pb2 as pb


def _header_changes(changes: HeaderChanges, message: pb.RouteRule) -> None:
    message.request_headers.SetInParent()
    message.request_headers.set.extend(pb.NameValue(name=n, value=v) for n, v in changes.set)
    message.request_headers.add.extend(pb.NameValue(name=n, value=v) for n, v in changes.add)
    message.request_headers.remove.extend(changes.remove)


def _redirect(redirect: Redirect, message: pb.RouteRule) -> None:
    message.redirect.SetInParent()
    message.redirect.scheme = redirect.scheme
    message.redirect.hostname = redirect.hostname
    message.redirect.port = redirect.port
    message.redirect.status_code = redirect.status_code
    message.redirect.replace_full_path = redirect.replace_full_path


def _timeouts(timeouts: RouteTimeouts, message: pb.RouteRule) -> None:
    """The one limit the agent enforces (`RouteTimeouts.server_ms`); nothing when the rule
    sets none."""
    server_ms = timeouts.server_ms
    if server_ms is not None:
        message.timeouts.server_timeout_ms = server_ms


FILTER_ENCODERS: Mapping[type, Callable[[Any, pb.RouteRule], None]] = {
    HeaderChanges: _header_changes,
    Redirect: _redirect,
    RouteTimeouts: _timeouts,
}
"""The snapshot's filter type -> what writes it into the rule's message."""


def encode_filters(filters: tuple[RouteFilter, ...], message: pb.RouteRule) -> None:
    """Each filter into its field of `message`."""
    for item in filters:
        FILTER_ENCODERS[type(item)](item, message)
