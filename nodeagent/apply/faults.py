"""Crash points for fault tests: `NODEAGENT_CRASH_AT=<point>` SIGKILLs the agent there.

Unset in production (the environment of the DaemonSet never names it). Points:
`after-config-write` (haproxy.cfg replaced, HAProxy not reloaded yet).
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

CRASH_ENV = "NODEAGENT_CRASH_AT"


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        log.critical("fault injection: SIGKILL at %s", name)
        os.kill(os.getpid(), signal.SIGKILL)
