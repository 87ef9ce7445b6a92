"""Compute benchmarks: full recompute at 10k/40k/160k endpoints, one-endpoint change
(recompute + publish into the snapshot store), and peak memory holding the 160k cluster.

Every figure includes encoding (`controlplane/publish/encode.py`): a computation is only
done when its snapshot bytes and hashes are. Full recompute is `compute(state, previous)`
then `encode` (stateless: plans and encodes every Service) with the
previous assignment of the same state (the reconcile loop's steady state), best of runs
(least noisy on a shared machine). The incremental figure uses `Computer().compute`
(reuses unchanged per-Service work) and alternates one endpoint address of one Service
between two values, so every call publishes a new version; the same change through the
stateless `compute()` is reported next to it. Memory is measured in fresh subprocesses:
peak RSS (VmHWM, whole process; baseline after imports subtracted) and tracemalloc's peak
(Python allocations only).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Mapping
from functools import partial

from controlplane.changes import ChangeLog
from controlplane.compute import Computer, ComputeResult, compute
from controlplane.model import ClusterState
from controlplane.publish import Encoder, SnapshotContent, encode
from controlplane.publish.store import SnapshotStore
from controlplane.snapshot import BackendSlots, WorkloadSnapshot
from tests.bench.common import (
    ENDPOINTS_PER_SERVICE,
    HAPROXY_PODS,
    Result,
    best_of,
    big_cluster,
    log,
    loopback_ip,
    median,
)

ComputeFn = Callable[[ClusterState, Mapping[str, BackendSlots]], ComputeResult]
EncodeFn = Callable[[Mapping[str, WorkloadSnapshot]], dict[str, SnapshotContent]]
FULL_SIZES = (500, 2000, 8000)  # Services: 10k, 40k, 160k endpoints
QUICK_SIZES = (25, 100, 400)


def make_computer() -> ComputeFn:
    """The function the incremental benchmark calls for each change: the incremental
    `Computer` (one line: `return compute` measures a full recompute instead)."""
    return Computer().compute


def full_compute(state: ClusterState, previous: Mapping[str, BackendSlots]) -> None:
    """A stateless computation and encoding from scratch."""
    encode(compute(state, previous).workloads)


def with_one_endpoint_changed(state: ClusterState, service_index: int, flip: bool) -> ClusterState:
    """`state` with the first endpoint of one Service's slice moved to another address."""
    slices = list(state.endpoint_slices)
    old = slices[service_index]
    first = old.endpoints[0]
    address = loopback_ip(service_index, base=0x7F_60_00_00) if flip else first.addresses[0]
    endpoints = (dataclasses.replace(first, addresses=(address,)), *old.endpoints[1:])
    slices[service_index] = dataclasses.replace(old, endpoints=endpoints)
    return dataclasses.replace(state, endpoint_slices=tuple(slices))


def bench_full(sizes: tuple[int, ...], repeat: int) -> list[Result]:
    results: list[Result] = []
    per_endpoint: dict[int, float] = {}
    for services in sizes:
        endpoints = services * ENDPOINTS_PER_SERVICE
        state = big_cluster(services)
        first = compute(state, {})
        best, times = best_of(partial(full_compute, state, first.assignment), repeat)
        per_endpoint[endpoints] = best / endpoints
        params = {
            "services": services,
            "endpoints": endpoints,
            "haproxy_pods": HAPROXY_PODS,
            "runs": repeat,
            "median_ms": round(median(times) * 1000, 1),
        }
        results.append(Result("compute.full", best * 1000, "ms", params))
        results.append(
            Result("compute.full_per_endpoint", best / endpoints * 1e6, "us/endpoint", params)
        )
        log(f"compute: full {endpoints} endpoints best {best * 1000:.0f} ms")
    smallest, largest = min(per_endpoint), max(per_endpoint)
    results.append(
        Result(
            "compute.linearity",
            per_endpoint[largest] / per_endpoint[smallest],
            "ratio",
            {"what": f"per-endpoint time at {largest} / at {smallest} (1.0 = linear)"},
        )
    )
    return results


def bench_incremental(
    services: int,
    changes: int,
    full_ms: float | None,
    computer: ComputeFn | None = None,
    prefix: str = "compute.one_change",
    keyed: bool = False,
) -> list[Result]:
    """One endpoint change in the cluster: recompute + publish into the store. `keyed`:
    each state carries its ChangeSet (the changed slice's key, as the sources hand it),
    so the Computer's change index reads that key instead of diffing every object."""
    computer = computer or make_computer()
    # The reconcile loop's pairing: the incremental Computer with one Encoder that keeps
    # unchanged backends' bytes; a stateless compute() is encoded from scratch.
    incremental = isinstance(getattr(computer, "__self__", None), Computer)
    encoder: EncodeFn = Encoder().encode if incremental else encode
    base = big_cluster(services)
    variants = [with_one_endpoint_changed(base, services // 2, flip) for flip in (True, False)]
    log_of_changes = ChangeLog()

    def handed(state: ClusterState) -> ClusterState:
        """`state` as a source hands it: with the changed slice's key, or without."""
        if not keyed:
            return state
        changed = state.endpoint_slices[services // 2]
        key = ("EndpointSlice", changed.namespace, changed.name)
        return dataclasses.replace(state, changes=log_of_changes.stamp({key: changed}))

    store = SnapshotStore()
    result = computer(handed(base), {})
    store.publish(encoder(result.workloads), result.pod_workloads)
    assignment = result.assignment
    compute_times: list[float] = []
    publish_times: list[float] = []
    for i in range(changes):
        state = handed(variants[i % 2])
        start = time.perf_counter()
        result = computer(state, assignment)
        contents = encoder(result.workloads)
        middle = time.perf_counter()
        changed = store.publish(contents, result.pod_workloads)
        end = time.perf_counter()
        if not changed:
            raise RuntimeError("an endpoint change published no new version")
        assignment = result.assignment
        compute_times.append(middle - start)
        publish_times.append(end - middle)
    totals = [c + p for c, p in zip(compute_times, publish_times, strict=True)]
    params = {
        "services": services,
        "endpoints": services * ENDPOINTS_PER_SERVICE,
        "changes": changes,
        "api": getattr(computer, "__qualname__", repr(computer)),
        "change_keys": keyed,
    }
    best_total = min(totals)
    results = [
        Result(f"{prefix}_total", best_total * 1000, "ms", params),
        Result(f"{prefix}_total_median", median(totals) * 1000, "ms", params),
        Result(f"{prefix}_compute", min(compute_times) * 1000, "ms", params),
        Result(f"{prefix}_publish", min(publish_times) * 1000, "ms", params),
    ]
    if full_ms is not None:
        results.append(
            Result(
                "compute.full_over_incremental",
                full_ms / (best_total * 1000),
                "ratio",
                {**params, "what": "full recompute / (one change: recompute + publish)"},
            )
        )
    log(f"compute: one change best {best_total * 1000:.1f} ms")
    return results


def _rss_kib() -> int:
    """Peak RSS of this process image (VmHWM; ru_maxrss would carry the parent's peak
    across fork+exec on Linux)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def memory_child(services: int, traced: bool) -> dict[str, float]:
    """Runs in a fresh process: build the cluster, compute, publish, hold everything."""
    if traced:
        tracemalloc.start()
    baseline = _rss_kib()
    state = big_cluster(services)
    result = compute(state, {})
    store = SnapshotStore()
    store.publish(encode(result.workloads), result.pod_workloads)
    out: dict[str, float] = {"baseline_kib": baseline, "maxrss_kib": _rss_kib()}
    if traced:
        current, peak = tracemalloc.get_traced_memory()
        out["traced_current_b"], out["traced_peak_b"] = current, peak
    del state, result, store
    return out


def bench_memory(services: int) -> list[Result]:
    results = []
    for traced in (False, True):
        cmd = [sys.executable, "-m", "tests.bench.compute", "--memory-child", str(services)]
        if traced:
            cmd.append("--traced")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        params = {"services": services, "endpoints": services * ENDPOINTS_PER_SERVICE}
        if traced:
            results.append(
                Result("compute.memory_traced_peak", data["traced_peak_b"] / 2**20, "MiB", params)
            )
            results.append(
                Result(
                    "compute.memory_traced_held", data["traced_current_b"] / 2**20, "MiB", params
                )
            )
        else:
            results.append(
                Result("compute.memory_peak_rss", data["maxrss_kib"] / 1024, "MiB", params)
            )
            results.append(
                Result(
                    "compute.memory_peak_rss_over_baseline",
                    (data["maxrss_kib"] - data["baseline_kib"]) / 1024,
                    "MiB",
                    {**params, "baseline_mib": round(data["baseline_kib"] / 1024, 1)},
                )
            )
    return results


# Targets (README, "Performance"), set at the full sizes: figure pattern -> target.
TARGETS = {
    "compute.full": "< 300 ms at 40k endpoints",
    "compute.one_change_total": "< 5 ms at 40k endpoints",
    "compute.linearity": "linear (~1)",
}


def run(quick: bool = False) -> list[Result]:
    sizes = QUICK_SIZES if quick else FULL_SIZES
    results = bench_full(sizes, repeat=2 if quick else 3)
    middle, largest = sizes[1], sizes[-1]
    full_ms = next(
        r.value for r in results if r.name == "compute.full" and r.parameters["services"] == middle
    )
    changes = 5 if quick else 20
    results += bench_incremental(middle, changes, full_ms=full_ms)
    # The same change with the source's change keys: the change index instead of the diff.
    results += bench_incremental(
        middle, changes, None, prefix="compute.one_change_keyed", keyed=True
    )
    results += bench_incremental(largest, changes, None, prefix="compute.one_change_large")
    results += bench_incremental(
        largest, changes, None, prefix="compute.one_change_large_keyed", keyed=True
    )
    # The same change through the stateless `compute()`: what the work was before.
    results += bench_incremental(
        middle, changes, None, computer=compute, prefix="compute.one_change_stateless"
    )
    results += bench_memory(sizes[-1])
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:
        print(json.dumps(memory_child(args.memory_child, args.traced)))
        return
    from tests.bench.__main__ import main as bench_main

    bench_main(["compute"])


if __name__ == "__main__":
    main()
