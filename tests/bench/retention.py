"""The control plane's memory for delta bases and built deltas, unbounded and bounded.

A settings edit changes every backend, so each retained content holds a whole snapshot's
backends and each delta from a base before the edit is as large as the snapshot. This
builds 2,000 Services x 20 endpoints served by 8 workloads, publishes 17 settings edits,
then asks each workload's delta from its 15 other retained bases (120 agents, each on a
different base; an agent whose base was evicted gets the shared full snapshot), with the
byte budgets off (0: only `--retained-versions` bounds, as before the budgets), with the
defaults, and with budgets small enough to evict bases. Each variant runs twice, each
time in a fresh process: once for RSS, once under tracemalloc (slower, not mixed).

    python -m tests.bench retention [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import tracemalloc
from typing import Any

from controlplane.compute import Computer
from controlplane.model import ClusterState
from controlplane.publish import Encoder
from controlplane.publish.store import (
    DEFAULT_DELTA_CACHE_BYTES,
    DEFAULT_RETAINED_BYTES,
    DEFAULT_RETAINED_VERSIONS,
    SnapshotStore,
)
from controlplane.snapshot import BackendSlots
from tests.bench.common import Result, big_cluster, log, loopback_ip
from tests.helpers.builders import haproxy_pod, settings

WORKLOADS = 8
PODS_PER_WORKLOAD = 4
EDITS = 17
MIB = 2**20
VARIANTS = {  # name: (--retained-bytes, --delta-cache-bytes)
    "unbounded": (0, 0),
    "defaults": (DEFAULT_RETAINED_BYTES, DEFAULT_DELTA_CACHE_BYTES),
    "tight": (16 * MIB, 8 * MIB),
}


def _status_kib(field: str) -> int:
    """A /proc/self/status figure in KiB (VmRSS: now; VmHWM: peak of this process)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _state(services: int) -> ClusterState:
    """`services` Services served by `WORKLOADS` DaemonSets of `PODS_PER_WORKLOAD` pods."""
    pods = tuple(
        haproxy_pod(
            f"haproxy-{w}-{p}",
            loopback_ip(w * PODS_PER_WORKLOAD + p, base=0x7F_01_00_00),
            owner=("DaemonSet", f"haproxy-{w}"),
        )
        for w in range(WORKLOADS)
        for p in range(PODS_PER_WORKLOAD)
    )
    return dataclasses.replace(big_cluster(services), haproxy_pods=pods)


def child(
    services: int, retained_bytes: int, delta_cache_bytes: int, traced: bool
) -> dict[str, Any]:
    """Runs in a fresh process: publish, edit, serve the agents' deltas; the figures."""
    if traced:
        tracemalloc.start()
    computer, encoder = Computer(), Encoder()
    store = SnapshotStore(retained_bytes=retained_bytes, delta_cache_bytes=delta_cache_bytes)
    state = _state(services)
    assignment: dict[str, BackendSlots] = {}
    hashes: dict[str, list[str]] = {}  # per workload: content hash of every edit
    out: dict[str, Any] = {}
    for edit in range(EDITS + 1):
        state = dataclasses.replace(state, settings=settings(**{"check-interval": f"{edit + 2}s"}))
        result = computer.compute(state, assignment)
        assignment = dict(result.assignment)
        contents = encoder.encode(result.workloads)
        store.publish(contents, result.pod_workloads)
        for workload, content in contents.items():
            hashes.setdefault(workload, []).append(content.content_hash)
        del result, contents
        if edit == 0:
            out.update(_figures(store, "first", traced))
    out.update(_figures(store, "edited", traced))
    deltas = snapshots = 0
    for workload, history in sorted(hashes.items()):
        current = history[-1]
        for base in history[-DEFAULT_RETAINED_VERSIONS:-1]:  # one agent per base
            if store.delta_message(workload, current, base) is None:
                snapshots += 1  # the shared full snapshot: nothing built
            else:
                deltas += 1
    out.update(_figures(store, "agents", traced))
    out.update(
        workloads=len(hashes),
        deltas=deltas,
        snapshots=snapshots,
        snapshot_bytes=len(store.get(sorted(hashes)[0]).content.payload),  # type: ignore[union-attr]
        peak_rss_kib=_status_kib("VmHWM"),
    )
    return out


def _figures(store: SnapshotStore, stage: str, traced: bool) -> dict[str, float]:
    gc.collect()
    figures: dict[str, float] = {
        f"{stage}_rss_kib": _status_kib("VmRSS"),
        f"{stage}_retained_bytes": store.retained_bytes,
        f"{stage}_retained_count": store.retained_count,
        f"{stage}_delta_cache_bytes": store.delta_cache_bytes,
    }
    if traced:
        figures[f"{stage}_traced_bytes"] = tracemalloc.get_traced_memory()[0]
    return figures


def _run_child(services: int, variant: str, traced: bool) -> dict[str, Any]:
    retained, cache = VARIANTS[variant]
    cmd = [sys.executable, "-m", "tests.bench.retention", "--child", str(services)]
    cmd += ["--retained-bytes", str(retained), "--delta-cache-bytes", str(cache)]
    if traced:
        cmd.append("--traced")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
    data: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def _mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def _budgets(variant: str) -> str:
    retained, cache = VARIANTS[variant]
    if not retained and not cache:
        return "unbounded (before)"
    return f"{retained // MIB}Mi / {cache // MIB}Mi"


def side_by_side(services: int, runs: dict[tuple[str, bool], dict[str, Any]]) -> str:
    """The figures of both variants as one table (MiB unless said)."""
    plain = [runs[(v, False)] for v in VARIANTS]
    traced = [runs[(v, True)] for v in VARIANTS]
    rows: list[tuple[str, ...]] = [
        (
            f"{services} Services x 20 endpoints, {plain[0]['workloads']} workloads, "
            f"{plain[0]['snapshot_bytes'] / MIB:.2f} MiB snapshot each",
            *(_budgets(name) for name in VARIANTS),
        )
    ]
    stages = (("first", "the first publish"), ("edited", f"{EDITS} settings edits"))
    for stage, what in (*stages, ("agents", "120 agents' deltas")):
        rows.append((f"RSS after {what}", *(_mib(r[f"{stage}_rss_kib"] * 1024) for r in plain)))
    rows.append(("peak RSS", *(_mib(r["peak_rss_kib"] * 1024) for r in plain)))
    for stage, what in (*stages, ("agents", "120 agents' deltas")):
        rows.append((f"traced after {what}", *(_mib(r[f"{stage}_traced_bytes"]) for r in traced)))
    rows.append(("retained_bytes (store)", *(_mib(r["agents_retained_bytes"]) for r in plain)))
    rows.append(
        ("delta_cache_bytes (store)", *(_mib(r["agents_delta_cache_bytes"]) for r in plain))
    )
    rows.append(("contents retained", *(str(r["agents_retained_count"]) for r in plain)))
    rows.append(
        (
            "agents sent a delta / the snapshot",
            *(f"{r['deltas']} / {r['snapshots']}" for r in plain),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    note = "(MiB; budgets: --retained-bytes / --delta-cache-bytes; RSS and traced: separate runs)"
    return "\n".join(lines) + "\n" + note


def run(quick: bool = False) -> list[Result]:
    services = 200 if quick else 2000
    runs: dict[tuple[str, bool], dict[str, Any]] = {}
    for traced in (False, True):
        for variant in VARIANTS:
            log(f"retention: {variant}{' traced' if traced else ''}")
            runs[(variant, traced)] = _run_child(services, variant, traced)
    print(side_by_side(services, runs), flush=True)
    results = []
    params = {"services": services, "workloads": WORKLOADS, "edits": EDITS, "agents": 120}
    for variant in VARIANTS:
        plain, traced_run = runs[(variant, False)], runs[(variant, True)]
        tagged = {**params, "budgets": variant}
        results += [
            Result("retention.rss_after_deltas", plain["agents_rss_kib"] / 1024, "MiB", tagged),
            Result("retention.peak_rss", plain["peak_rss_kib"] / 1024, "MiB", tagged),
            Result(
                "retention.traced_after_deltas",
                traced_run["agents_traced_bytes"] / MIB,
                "MiB",
                tagged,
            ),
        ]
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--retained-bytes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--delta-cache-bytes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        data = child(args.child, args.retained_bytes, args.delta_cache_bytes, args.traced)
        print(json.dumps(data))
        return
    from tests.bench.__main__ import main as bench_main

    bench_main(["retention"])


if __name__ == "__main__":
    main()
