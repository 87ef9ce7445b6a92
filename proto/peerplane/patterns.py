"""What a route rule may carry into haproxy.cfg, a map file or the runtime socket.

The route model's strings come from Ingresses and HTTPRoutes: objects any namespace owner
writes. Compute refuses (and reports) a route whose hostname, path, header, query
parameter, method or redirect does not match these patterns, and the agent re-checks
every string against the same ones before it writes it (docs/design.md, "Untrusted
strings"). The patterns are deliberately narrower than HTTP allows: no space, quote,
backslash, `#`, `$`, `{`, `}`, `[`, `]` or control character can pass, so a value needs no
quoting in a configuration line, a map file or a runtime API command. Every pattern is
meant for a whole-string match (`fullmatch`).
"""

from __future__ import annotations

import re

from peerplane import names

# Characters a path may hold: RFC 3986 unreserved, percent-escapes and the sub-delimiters
# HAProxy reads literally in an argument (no `'`, `(`, `)`, `$`, `&`, `*`).
MAX_PATH = 1024
PATH = re.compile(rf"/[A-Za-z0-9._~%/+,;=:@!-]{{0,{MAX_PATH - 1}}}")

# Header names: RFC 7230 tokens narrowed to letters, digits and `-`.
HEADER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
# Header values matched, set or added: no space, quote or backslash.
HEADER_VALUE = re.compile(r"[A-Za-z0-9._~%/+,;=:@!*?&-]{0,256}")

QUERY_NAME = re.compile(r"[A-Za-z0-9._~%+-]{1,128}")
QUERY_VALUE = re.compile(r"[A-Za-z0-9._~%+,;:@!*/-]{0,256}")

METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
REDIRECT_SCHEMES = frozenset({"http", "https"})
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
MAX_WEIGHT = 1_000_000

WILDCARD_PREFIX = "*."

# A TLS certificate's name: `<namespace>_<secret name>` (a namespace holds no `_`), the
# agent's file name for it (`<certs dir>/<name>.pem`) and a word of its runtime commands.
CERTIFICATE_NAME = re.compile(
    r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?_[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?"
)


def is_path(text: str) -> bool:
    """A path match value, a redirect's full path (whole-string match)."""
    return PATH.fullmatch(text) is not None


def is_prefix_replacement(text: str) -> bool:
    """A ReplacePrefixMatch value: a path, or "" (the matched prefix removed)."""
    return text == "" or is_path(text)


def is_header_name(text: str) -> bool:
    return HEADER_NAME.fullmatch(text) is not None


def is_header_value(text: str) -> bool:
    return HEADER_VALUE.fullmatch(text) is not None


def is_query_name(text: str) -> bool:
    return QUERY_NAME.fullmatch(text) is not None


def is_query_value(text: str) -> bool:
    return QUERY_VALUE.fullmatch(text) is not None


def is_method(text: str) -> bool:
    return text in METHODS


def is_certificate_name(text: str) -> bool:
    return CERTIFICATE_NAME.fullmatch(text) is not None


def is_wildcard_host(text: str) -> bool:
    """`*.` followed by a host name: matches one or more labels before the suffix."""
    return text.startswith(WILDCARD_PREFIX) and names.is_host_name(text[len(WILDCARD_PREFIX) :])


def is_route_host(text: str) -> bool:
    """A lower-case host name or a `*.` wildcard, as a rule's hostnames hold them."""
    return names.is_host_name(text) or is_wildcard_host(text)


def host_matches(pattern: str, host: str) -> bool:
    """Whether a request's (lower-case, port-less) host is answered by `pattern`: equal,
    or, for `*.suffix`, ending in `.suffix` with at least one label before it."""
    if pattern.startswith(WILDCARD_PREFIX):
        suffix = pattern[1:]  # ".suffix"
        return host.endswith(suffix) and len(host) > len(suffix)
    return host == pattern
