"""RequestRedirect: answer with a redirect (scheme, host, port, full path, 301 or 302)."""

from __future__ import annotations

from controlplane.model import HTTPRouteFilter
from controlplane.routes.filters.base import Refused
from controlplane.settings.values import shown
from controlplane.snapshot import Redirect
from peerplane import names as hosts
from peerplane import patterns


def translate(item: HTTPRouteFilter) -> Redirect | Refused | None:
    """The redirect, or the first of its values peerplane does not serve (a
    ReplacePrefixMatch path, a port outside 1-65535, ...)."""
    wanted = item.request_redirect
    if wanted is None:
        return None
    problem = ""
    if wanted.scheme and wanted.scheme not in patterns.REDIRECT_SCHEMES:
        problem = f"scheme {wanted.scheme} (http or https only)"
    elif wanted.hostname and not hosts.is_host_name(wanted.hostname):
        problem = "hostname is not a lower-case host name"
    elif wanted.port is not None and not 1 <= wanted.port <= 65535:
        problem = f"port {shown(str(wanted.port), 20)} is not in 1-65535"
    elif wanted.status_code not in patterns.REDIRECT_CODES:
        problem = f"status code {wanted.status_code} (301 or 302 only)"
    elif wanted.path_type not in ("", "ReplaceFullPath"):
        problem = f"path {wanted.path_type} (only ReplaceFullPath is served)"
    elif wanted.path_type and not patterns.is_path(wanted.path_value):
        problem = "replaceFullPath is not a path peerplane serves"
    if problem:
        return Refused(problem)
    return Redirect(
        wanted.scheme, wanted.hostname, wanted.port or 0, wanted.status_code, wanted.path_value
    )
