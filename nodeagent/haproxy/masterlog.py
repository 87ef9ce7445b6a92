"""The managed HAProxy master's own output, kept in a bounded buffer.

HAProxy 2.6 answers a master CLI `reload` with nothing: when the reload fails, its reasons
(`[ALERT] ... cannot bind socket ...`) only go to the master's stderr. The supervisor
reads that stream into a `MasterLog`, so that a NACK can quote HAProxy's own words. 2.7
and later also return them in the `reload` reply; this is the 2.6 path.
"""

from __future__ import annotations

import collections
import os
import re
import threading
import time
from typing import BinaryIO

from peerplane.runtime.untrusted import clean

# "[ALERT]    (1234) : message" -> level, message
_LINE = re.compile(r"^\[(ALERT|WARNING|NOTICE)\]\s+\(\d+\)\s*:\s*(.*)$")
REASON_LINES = 5  # HAProxy's last lines of one level quoted in a NACK
REASON_CHARS = 1024  # before escaping; NACK text is kept up to 4,096 characters


class MasterLog:
    """The last `max_lines` lines HAProxy wrote, each numbered, safe across threads."""

    def __init__(self, max_lines: int = 500) -> None:
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=max_lines)
        self._next = 0
        self._cond = threading.Condition()

    def append(self, line: str) -> None:
        with self._cond:
            self._lines.append((self._next, line))
            self._next += 1
            self._cond.notify_all()

    def mark(self) -> int:
        """A position: `since(mark)` returns only what is written after it."""
        with self._cond:
            return self._next

    def since(self, mark: int) -> list[str]:
        with self._cond:
            return [line for n, line in self._lines if n >= mark]

    def wait_for(self, mark: int, text: str, timeout: float) -> list[str]:
        """The lines since `mark`, once one of them contains `text` or `timeout` passes."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                lines = [line for n, line in self._lines if n >= mark]
                left = deadline - time.monotonic()
                if any(text in line for line in lines) or left <= 0:
                    return lines
                self._cond.wait(left)


def pump(stream: BinaryIO, into: MasterLog, echo_fd: int | None = 2) -> None:
    """Copy `stream` line by line into `into` (and to `echo_fd`, where HAProxy wrote before
    its output was captured) until it closes."""
    with stream:
        for raw in iter(stream.readline, b""):
            if echo_fd is not None:
                try:
                    os.write(echo_fd, raw)
                except OSError:
                    echo_fd = None
            into.append(raw.decode(errors="replace").rstrip("\r\n"))


def failure_reason(lines: list[str]) -> str:
    """HAProxy's own words for a failed (re)load or start: its last ALERT lines, else its
    WARNINGs, without the level and PID prefix; empty when it said nothing of either.
    Bounded and escaped (`untrusted.clean`): it becomes NACK text, logs, ListAgents."""
    by_level: dict[str, list[str]] = {"ALERT": [], "WARNING": []}
    for line in lines:
        m = _LINE.match(line.strip())
        if m and m.group(1) in by_level:
            by_level[m.group(1)].append(m.group(2).strip())
    chosen = (by_level["ALERT"] or by_level["WARNING"])[-REASON_LINES:]
    return clean("; ".join(chosen), REASON_CHARS) if chosen else ""


def last_words(lines: list[str]) -> str:
    """`failure_reason`, or else the last lines whatever they say (a wrapper's error, a
    crash): bounded and escaped the same way; empty when nothing was written."""
    reason = failure_reason(lines)
    if reason:
        return reason
    tail = [line.strip() for line in lines if line.strip()][-REASON_LINES:]
    return clean("; ".join(tail), REASON_CHARS) if tail else ""
