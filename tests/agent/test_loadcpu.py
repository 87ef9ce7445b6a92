"""`nodeagent.haproxy.loadcpu`: the CPU a start's process tree used, read from /proc."""

from __future__ import annotations

import subprocess
import sys

from nodeagent.haproxy.loadcpu import tree_cpu_seconds

_BURN = "import time\nend = time.process_time() + {s}\nwhile time.process_time() < end: pass"


def test_a_busy_descendant_counts_while_alive_and_once_reaped() -> None:
    """A shell (the wrapper a master may be) whose child burns CPU: counted while the
    child lives (a descendant) and after the shell reaped it (its cutime)."""
    script = f'{sys.executable} -c "{_BURN.format(s=0.3)}"; sleep 30'
    shell = subprocess.Popen(["/bin/sh", "-c", script])
    try:
        first = tree_cpu_seconds(shell.pid)
        assert first is not None
        deadline = 50
        while deadline and (tree_cpu_seconds(shell.pid) or 0.0) - first < 0.3:
            subprocess.run(["sleep", "0.1"], check=True)
            deadline -= 1
        assert (tree_cpu_seconds(shell.pid) or 0.0) - first >= 0.29
    finally:
        shell.kill()
        shell.wait()


def test_a_gone_process_has_none() -> None:
    done = subprocess.Popen(["true"])
    done.wait()
    assert tree_cpu_seconds(done.pid) is None
