"""URLRewrite: the Host header and the path the backend gets (ReplaceFullPath, or
ReplacePrefixMatch on a rule of exactly one PathPrefix match: `rule_filters`)."""

from __future__ import annotations

from controlplane.model import HTTPRouteFilter
from controlplane.routes.filters.base import Refused
from controlplane.snapshot import PathRewrite, URLRewrite
from peerplane import names as hosts
from peerplane import patterns


def translate(item: HTTPRouteFilter) -> URLRewrite | Refused | None:
    """The rewrite, or the first of its values peerplane does not serve."""
    wanted = item.url_rewrite
    if wanted is None:
        return None
    if wanted.hostname and not hosts.is_host_name(wanted.hostname):
        return Refused("hostname is not a lower-case host name")
    path = path_rewrite(wanted.path_type, wanted.path_value)
    if isinstance(path, Refused):
        return path
    return URLRewrite(wanted.hostname, path)


def path_rewrite(path_type: str, value: str) -> PathRewrite | Refused | None:
    """An HTTPPathModifier as written: None when absent (the request's path kept)."""
    if path_type == "":
        return None
    if path_type == "ReplaceFullPath":
        if not patterns.is_path(value):
            return Refused("replaceFullPath is not a path peerplane serves")
    elif path_type == "ReplacePrefixMatch":
        if not patterns.is_prefix_replacement(value):
            return Refused("replacePrefixMatch is not a path peerplane serves")
    else:
        return Refused(f"path type {path_type} (ReplaceFullPath or ReplacePrefixMatch)")
    return PathRewrite(path_type, value)
