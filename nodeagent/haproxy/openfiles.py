"""The open-files limit HAProxy gets and the threads it runs, learned once at agent start.

HAProxy inherits RLIMIT_NOFILE from whoever starts it: the agent under `--manage-haproxy`,
the container runtime otherwise, which gives every container of a pod the same limits (the
agent reads its own). HAProxy raises its soft limit itself, up to the hard one, so the
hard limit is what a config must fit in (`nodeagent/config/descriptors.py`). The agent
raises its own soft limit to the hard one as well: its HAProxy then starts at the limit it
may use, and HAProxy's own refusal names that figure, not a lower soft one.
"""

from __future__ import annotations

import logging
import re
import resource
import subprocess

log = logging.getLogger(__name__)

_THREADS = re.compile(r"multi-threading support \([^)]*\bdefault=(\d{1,5})\)")


def raise_soft_limit() -> int | None:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the hard limit (None
    when unlimited). Logged: the operator sees the figure HAProxy must fit in."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as e:  # a hard limit above the kernel's nr_open
            log.warning("cannot raise the open-files limit from %d to %d: %s", soft, hard, e)
    now, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        log.info("open-files limit: unlimited (soft was %d)", soft)
        return None
    log.info("open-files limit: %d (soft was %d, now %d)", hard, soft, now)
    return int(hard)


def parse_threads(text: str) -> int | None:
    """HAProxy's default thread count from `haproxy -vv` (`... default=N)`), None if absent."""
    found = _THREADS.search(text)
    return int(found.group(1)) if found else None


def default_threads(haproxy_bin: str, timeout: float = 10.0) -> int:
    """The threads HAProxy starts here without `nbthread` (its CPUs, capped by its build),
    from `haproxy -vv`; 1 when it cannot be learned (an estimate too low is safe: HAProxy
    then refuses in its own words)."""
    try:
        done = subprocess.run(
            [haproxy_bin, "-vv"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("cannot run %s -vv (%s): assuming 1 thread", haproxy_bin, e)
        return 1
    threads = parse_threads(done.stdout + done.stderr)
    if threads is None:
        log.warning("no thread count in %s -vv: assuming 1 thread", haproxy_bin)
        return 1
    return threads
