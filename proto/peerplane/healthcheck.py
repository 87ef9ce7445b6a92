"""Health-check vocabulary the control plane and the agent share.

Compute accepts only what this module allows, and the agent re-checks the same bounds
before it writes `check inter ... rise ... fall ...` or `option httpchk GET <path>`, so
the two can never disagree about what reaches haproxy.cfg. The path is the only string:
it is limited to unreserved URL characters and `/`, an optional query of the same plus
`=` and `&` (no space, quote, `#` or `\\`, which haproxy.cfg would read as syntax).
"""

from __future__ import annotations

import re

DEFAULT_INTERVAL_MS = 2000  # HAProxy's own default `inter`
DEFAULT_RISE = 2  # HAProxy's default
DEFAULT_FALL = 3  # HAProxy's default
MIN_INTERVAL_MS = 100  # below this, checks load the backends more than traffic does
MAX_INTERVAL_MS = 3_600_000  # one hour: a check slower than this detects nothing
MAX_COUNT = 100  # rise and fall
MAX_PATH = 255
PATH = re.compile(r"/[A-Za-z0-9._~/-]{0,200}(\?[A-Za-z0-9._~=&-]{1,54})?")


def is_interval_ms(value: int) -> bool:
    return MIN_INTERVAL_MS <= value <= MAX_INTERVAL_MS


def is_count(value: int) -> bool:
    return 1 <= value <= MAX_COUNT


def is_path(text: str) -> bool:
    """An HTTP check path the agent writes into haproxy.cfg (whole-string match)."""
    return len(text) <= MAX_PATH and PATH.fullmatch(text) is not None
