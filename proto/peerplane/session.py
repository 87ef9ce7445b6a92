"""Session persistence (GEP-1619) words both programs check: cookie and header names,
the longest lifetime served, and the names used when a rule gives none.

A cookie's value is its slot's server name (`SRV_n`): the same pod on every HAProxy
instance, with no replication. Why that is safe when a slot is reused: docs/design.md,
"Session persistence".
"""

from __future__ import annotations

import hashlib
import re

from peerplane import patterns

# A cookie name written into haproxy.cfg and Set-Cookie: an RFC 6265 token, narrowed to
# characters that need no quoting anywhere.
COOKIE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
HEADER_NAME = patterns.HEADER_NAME
# A freed slot is kept out of reuse for as long as a cookie can still name it, so the
# longest lifetime served bounds that quarantine (and the slot ledger's history).
MAX_LIFETIME_S = 30 * 24 * 3600
# HAProxy dates its cookies in units of 4 s: 3.0 and 3.2 were seen honouring a cookie
# up to 4 s past its maxidle or maxlife (2.6 not). A slot's quarantine adds two units.
COOKIE_DATE_SLACK_S = 8
DEFAULT_HEADER = "Session-Id"
# A Header table's key: the header value's first bytes (HAProxy truncates longer ones).
HEADER_KEY_LEN = 128


def is_cookie_name(text: str) -> bool:
    return COOKIE_NAME.fullmatch(text) is not None


def default_cookie_name(backend: str) -> str:
    """A rule without sessionName: a name of the backend's own, the same on every
    instance and every replica, that does not show the namespace or Service."""
    return "pp" + hashlib.sha256(backend.encode()).hexdigest()[:12]
