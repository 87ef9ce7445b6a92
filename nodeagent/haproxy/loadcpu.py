"""The CPU an HAProxy start has used so far: how the agent tells a master still loading a
big config (keep waiting) from one that hangs (give up).

A start of 8,000 backends on HAProxy 2.6 is 3.5 s of CPU on an idle host and 20-29 s of
wall time on a loaded one (docs/findings.md, "HAProxy 2.6's first start at 8,000
Services"): a fixed start timeout NACKs it once though it is only waiting for a core.
Counted: the master's own CPU, that of the children it has reaped (a wrapper's steps
before it execs HAProxy) and that of its live descendants (a 3.x worker loading the
config), all from /proc. `stat_fields` reads /proc/PID/stat for the supervisor too (is an
adopted master a zombie).
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of `pid`, its reaped children and its live descendants; None when
    `pid` is gone (or /proc cannot tell)."""
    own = _cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(_cpu_seconds(p) or 0.0 for p in _descendants(pid))


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name's closing parenthesis (the
    name may hold spaces), the state (field 3) first; None when `pid` is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].decode("ascii", "replace").split()


def _cpu_seconds(pid: int) -> float | None:
    """Its own CPU and that of the children it reaped: utime (14), stime (15), cutime
    (16) and cstime (17), at 11..14 of `stat_fields`."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    try:
        return sum(int(v) for v in fields[11:15]) / _TICKS
    except ValueError:
        return None


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found.extend(children)
            todo.extend(children)
    return found
