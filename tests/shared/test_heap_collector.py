"""peerplane/runtime/heap.py's `tune_collector`: the agent and the control plane collect
the youngest generation every `YOUNG_COLLECTION_AT` allocations, not every 700 (an
endpoint change at 8,000 Services spent 1.6 ms in the young collection it triggered).

docs/findings.md, "Control-plane CPU per endpoint change: young collections"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from peerplane.runtime import heap

pytestmark = pytest.mark.unit

# What a fresh interpreter's collector looks like after `code`, and how many young
# collections making 100,000 tracked objects (kept alive: the count is net of frees)
# then cost it.
_PROBE = """
import gc, json
def churn():
    before = sum(g["collections"] for g in gc.get_stats())  # each collects the youngest
    kept = [[n] for n in range(100_000)]
    return sum(g["collections"] for g in gc.get_stats()) - before
print(json.dumps([gc.get_threshold(), churn()]))
"""


def _after(code: str) -> tuple[list[str], tuple[int, int, int], int]:
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE")}
    done = subprocess.run(
        [sys.executable, "-c", code + _PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
    )
    *printed, probed = done.stdout.splitlines()
    threshold, collections = json.loads(probed)
    return printed, tuple(threshold), collections


def test_the_young_generation_is_collected_every_10000_allocations_the_others_kept() -> None:
    _, default, default_collections = _after("")
    _, tuned, tuned_collections = _after(
        "from peerplane.runtime import heap; heap.tune_collector()"
    )
    assert tuned == (heap.YOUNG_COLLECTION_AT, default[1], default[2])
    # 100,000 lists made: one young collection per 700 of them by default, per 10,000 tuned
    assert default_collections >= 100_000 // default[0] - 1
    assert tuned_collections <= 100_000 // heap.YOUNG_COLLECTION_AT + 1


def test_serve_and_the_agent_tune_the_collector_at_start(tmp_path: Path) -> None:
    """Each returns 2 on flags it cannot run with, after its start set the process up."""
    serve = ["serve", "--source", f"files:{tmp_path / 'nowhere'}", "--listen", "127.0.0.1:0"]
    agent = [
        "run",
        "--control-plane",
        "127.0.0.1:1",
        "--config",
        str(tmp_path / "haproxy.cfg"),
        "--state-dir",
        str(tmp_path / "state"),
    ]  # no pod identity: refused before it connects
    for module, argv in (("controlplane.cli", serve), ("nodeagent.cli", agent)):
        printed, threshold, _ = _after(f"from {module} import main; print(main({argv!r}))")
        assert printed[-1:] == ["2"], module
        assert threshold[0] == heap.YOUNG_COLLECTION_AT, module
