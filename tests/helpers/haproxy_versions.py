"""The HAProxy binaries installed here, one per LTS series, for tests that run on each.

`.ci/install-haproxy` installs Debian 12's HAProxy 2.6 as /usr/sbin/haproxy, and 3.0
(Debian 13) and 3.2 (Debian testing) under /opt/peerplane-haproxy/<series>/haproxy (CI
fails when it cannot); a developer machine may have only some of them.
Tests take the `haproxy_bin` fixture (tests/conftest.py), parametrized over what is found
here, and the run's summary says which versions ran.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
from dataclasses import dataclass

SYSTEM_BINARY = "/usr/sbin/haproxy"
EXTRA_GLOB = "/opt/peerplane-haproxy/*/haproxy"
_VERSION = re.compile(r"HA-?Proxy version (\d+)\.(\d+)\.(\d+)\S*")


@dataclass(frozen=True)
class HAProxyBinary:
    """One installed HAProxy: where it is and what `haproxy -v` says it is."""

    path: str
    version: str  # e.g. "2.6.12"

    @property
    def series(self) -> str:
        """Major.minor, e.g. "3.0": the test id."""
        return ".".join(self.version.split(".")[:2])

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        major, minor, patch = (int(p) for p in self.version.split("."))
        return major, minor, patch


def probe(path: str) -> HAProxyBinary | None:
    """The binary's version, or None when it is missing or does not run."""
    if not os.access(path, os.X_OK):
        return None
    try:
        out = subprocess.run(
            [path, "-v"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(out)
    if not match:
        return None
    return HAProxyBinary(path, ".".join(match.groups()))


@functools.cache
def installed() -> tuple[HAProxyBinary, ...]:
    """Every working HAProxy found, one per series, oldest series first."""
    found: dict[str, HAProxyBinary] = {}
    for path in [SYSTEM_BINARY, *sorted(glob.glob(EXTRA_GLOB))]:
        binary = probe(path)
        if binary is not None and binary.series not in found:
            found[binary.series] = binary
    return tuple(sorted(found.values(), key=lambda b: b.version_tuple))
