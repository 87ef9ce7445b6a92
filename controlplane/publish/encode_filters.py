"""The snapshot's route filters -> their fields of the contract's RouteRule: one encoder
per filter type, joined in `FILTER_ENCODERS` (docs/design.md, "Adding a route filter")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from controlplane.snapshot import (
    HeaderChanges,
    Redirect,
    ResponseHeaderChanges,
    RouteFilter,
    RouteTimeouts,
    URLRewrite,
)
from peerplane.v1 import peerplane_pb2 as pb


def _modifier(changes: HeaderChanges | ResponseHeaderChanges, into: pb.HeaderModifier) -> None:
    into.SetInParent()
    into.set.extend(pb.NameValue(name=n, value=v) for n, v in changes.set)
    into.add.extend(pb.NameValue(name=n, value=v) for n, v in changes.add)
    into.remove.extend(changes.remove)


def _header_changes(changes: HeaderChanges, message: pb.RouteRule) -> None:
    _modifier(changes, message.request_headers)


def _response_header_changes(changes: ResponseHeaderChanges, message: pb.RouteRule) -> None:
    _modifier(changes, message.response_headers)


def _url_rewrite(rewrite: URLRewrite, message: pb.RouteRule) -> None:
    message.url_rewrite.SetInParent()
    message.url_rewrite.hostname = rewrite.hostname
    if rewrite.path is None:
        return
    if rewrite.path.type == "ReplaceFullPath":
        message.url_rewrite.path.replace_full_path = rewrite.path.value
    else:
        message.url_rewrite.path.replace_prefix_match = rewrite.path.value


def _redirect(redirect: Redirect, message: pb.RouteRule) -> None:
    message.redirect.SetInParent()
    message.redirect.scheme = redirect.scheme
    message.redirect.hostname = redirect.hostname
    message.redirect.port = redirect.port
    message.redirect.status_code = redirect.status_code
    if redirect.replace_full_path:
        message.redirect.replace_full_path = redirect.replace_full_path
    if redirect.replace_prefix_match is not None:
        message.redirect.replace_prefix_match = redirect.replace_prefix_match


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
    URLRewrite: _url_rewrite,
    ResponseHeaderChanges: _response_header_changes,
}
"""The snapshot's filter type -> what writes it into the rule's message."""


def encode_filters(filters: tuple[RouteFilter, ...], message: pb.RouteRule) -> None:
    """Each filter into its field of `message`."""
    for item in filters:
        FILTER_ENCODERS[type(item)](item, message)
