"""RequestRedirect: answer with a redirect (scheme, host, port, path, 301, 302, 303, 307
or 308)."""

from __future__ import annotations

from controlplane.model import HTTPRouteFilter
from controlplane.routes.filters.base import Refused
from controlplane.routes.filters.url_rewrite import path_rewrite
from controlplane.settings.values import shown
from controlplane.snapshot import Redirect
from peerplane import names as hosts
from peerplane import patterns


def translate(item: HTTPRouteFilter) -> Redirect | Refused | None:
    """The redirect, or the first of its values peerplane does not serve (a port outside
    1-65535, ...)."""
    wanted = item.request_redirect
    if wanted is None:
        return None
    codes = ", ".join(map(str, sorted(patterns.REDIRECT_CODES)))
    problem = ""
    if wanted.scheme and wanted.scheme not in patterns.REDIRECT_SCHEMES:
        problem = f"scheme {wanted.scheme} (http or https only)"
    elif wanted.hostname and not hosts.is_host_name(wanted.hostname):
        problem = "hostname is not a lower-case host name"
    elif wanted.port is not None and not 1 <= wanted.port <= 65535:
        problem = f"port {shown(str(wanted.port), 20)} is not in 1-65535"
    elif wanted.status_code not in patterns.REDIRECT_CODES:
        problem = f"status code {wanted.status_code} ({codes} only)"
    if problem:
        return Refused(problem)
    path = path_rewrite(wanted.path_type, wanted.path_value)
    if isinstance(path, Refused):
        return path
    full = path.value if path is not None and path.type == "ReplaceFullPath" else ""
    prefix = path.value if path is not None and path.type == "ReplacePrefixMatch" else None
    return Redirect(
        wanted.scheme, wanted.hostname, wanted.port or 0, wanted.status_code, full, prefix
    )
