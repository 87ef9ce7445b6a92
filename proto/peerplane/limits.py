"""Name and size limits the control plane and the agent share, so that compute never emits a
name the agent would refuse (one refused name makes the agent NACK the whole snapshot).

Backend names are `<namespace>_<service>_<port>`: with Kubernetes' own limits (DNS labels
of 63, port names of 15) they reach 63 + 1 + 63 + 1 + 15 = 143 characters. HAProxy sets no
length limit on proxy names (`haproxy -c` accepts thousands of characters; a stick table
named with 255 replicates through peers), and allows letters, digits, `_ . : -`; the bound
here is ours, above anything compute builds. Workload keys are `<namespace>/<Kind>/<name>`
and appear in a comment of haproxy.cfg and in logs: a Kubernetes owner name may be longer
or hold characters outside this pattern, and such a workload is refused by compute.
"""

from __future__ import annotations

import re

MAX_PROXY_NAME = 255
PROXY_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_PROXY_NAME - 1}}}")
MAX_WORKLOAD_KEY = 300
WORKLOAD_KEY = re.compile(rf"[A-Za-z0-9/_.-]{{0,{MAX_WORKLOAD_KEY}}}")


def is_proxy_name(text: str) -> bool:
    """A backend name the agent writes into haproxy.cfg (whole-string match)."""
    return PROXY_NAME.fullmatch(text) is not None


def is_workload_key(text: str) -> bool:
    """A workload key the agent accepts (whole-string match)."""
    return WORKLOAD_KEY.fullmatch(text) is not None


# Server slots per backend. Compute never assigns a slot above it, the slot loaders drop a
# backend whose persisted count exceeds it, and the agent refuses a snapshot holding a slot
# above it. 10,000 slots hold a 5,000-pod Service through a full rollout inside one
# stick-table expire (freed slots are not reused within it), at ~40 bytes of haproxy.cfg
# and ~30 bytes of slot state per slot.
MAX_SLOTS = 10_000

# Stick tables. Compute rejects a larger value, the agent refuses to write one.
MAX_TABLE_SIZE = 1 << 30  # entries: a stick table larger than this is a typo
MAX_EXPIRE_MS = (1 << 31) - 1  # HAProxy keeps expiry in a signed 32-bit ms counter

# A certificate's PEM as the agent writes it (chain, then key). The agent refuses a larger
# one, and the control plane refuses a Secret whose PEM, written again from what it parsed
# (base64 in 64-character lines, larger than a Secret's single-line base64), would be larger.
MAX_CERTIFICATE_PEM = 1 << 20  # a chain of a few certificates and a key is a few KB

# A route rule's server timeout (`RouteRule.timeouts`): HAProxy keeps timeouts in a signed
# 32-bit ms counter (`set-timeout` refuses more). Compute refuses a longer duration.
MAX_TIMEOUT_MS = (1 << 31) - 1
