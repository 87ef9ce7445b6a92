"""`python -m tests.bench [NAME ...] [--quick | --full]`: run benchmarks, print a table,
write JSON.

`--quick` (the default, `make bench`) runs every benchmark's quick form: smaller sizes and
fewer rounds through the same code paths and production settings (`--state`, the
Kubernetes ledger where a benchmark has one, health checks on), in about 5 minutes on 2
shared cores. `--full` (`make bench-full`, or `make bench BENCH_FULL=1`) runs the full
sizes the README's figures come from: well over half an hour. Every benchmark prints its
own tables as it goes; the run ends with one table of every figure and its target.
Results go to tests/bench/results.json (entries of benchmarks not run this time are kept).

Adding a benchmark is one line in `BENCHMARKS`: its name and module. The module has
`run(quick: bool = False) -> list[Result]` (its quick and full sizes are its own) and may
declare `TARGETS` (`tests/bench/summary.py`: figure-name pattern -> target text).
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.bench import before as before_run
from tests.bench.common import RESULTS_PATH, Result, log, write_results
from tests.bench.summary import Ran, summary_table


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A registered benchmark: its name on the command line and its module."""

    name: str
    module: str


# In the order they run; one line per benchmark.
BENCHMARKS: list[Benchmark] = [
    Benchmark("compute", "tests.bench.compute"),
    Benchmark("fanout", "tests.bench.fanout"),
    Benchmark("haproxy", "tests.bench.haproxy"),
    Benchmark("e2e", "tests.bench.e2e"),
    Benchmark("stability", "tests.bench.stability"),
    Benchmark("churn", "tests.bench.churn"),
    Benchmark("persistence", "tests.bench.persistence"),
    Benchmark("reload_pair", "tests.bench.reload_pair"),
    Benchmark("scale", "tests.bench.scale"),
    Benchmark("agent_apply", "tests.bench.agent_apply"),
    Benchmark("failover", "tests.bench.failover"),
    Benchmark("retention", "tests.bench.retention"),
    Benchmark("status", "tests.bench.status"),
    Benchmark("route_table", "tests.bench.route_table"),
    Benchmark("route_delta", "tests.bench.route_delta"),
    Benchmark("route_propagation", "tests.bench.routes"),
    Benchmark("api_servers", "tests.bench.apiservers"),
    Benchmark("tls", "tests.bench.tls"),
    Benchmark("tls_rotation", "tests.bench.tls_rotation"),
    Benchmark("soak", "tests.bench.soak"),
]
SCALABLE = ("fanout", "churn")  # the benchmarks `--agents` sizes
FULL_ENV = "BENCH_FULL"  # set to 1: `--full` unless `--quick` is given


def run_one(benchmark: Benchmark, quick: bool, agents: int | None) -> Ran:
    """One benchmark; a failure is recorded (with its traceback on stderr), not raised."""
    ran = Ran(benchmark.name)
    log(f"== {benchmark.name} ({'quick' if quick else 'full'})")
    start = time.monotonic()
    try:
        module = importlib.import_module(benchmark.module)
        ran.targets = getattr(module, "TARGETS", {})
        kwargs = {"agents": agents} if benchmark.name in SCALABLE and agents else {}
        ran.results = module.run(quick=quick, **kwargs)
    except Exception as err:
        traceback.print_exc()
        ran.error = f"{type(err).__name__}: {err}".splitlines()[0]
    ran.seconds = time.monotonic() - start
    log(f"== {benchmark.name}: {ran.seconds:.0f}s{' FAILED' if ran.error else ''}")
    return ran


def wants_full(full: bool, quick: bool, environ: Mapping[str, str]) -> bool:
    """`--full`, or `BENCH_FULL` set (not "0") without `--quick`: the full sizes."""
    return full or (not quick and environ.get(FULL_ENV, "") not in ("", "0"))


def main(argv: list[str] | None = None) -> int:
    names = [b.name for b in BENCHMARKS]
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("names", nargs="*", choices=[*names, []], metavar="NAME")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="quick forms (the default)")
    size.add_argument("--full", action="store_true", help=f"full sizes (or {FULL_ENV}=1)")
    parser.add_argument("--agents", type=int, default=None, help="fan-out and churn: agent streams")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help="JSON output file")
    parser.add_argument(
        "--before",
        nargs="?",
        const=before_run.DEFAULT_BEFORE,
        default=None,
        metavar="REV",
        help=f"also run {', '.join(before_run.COMPARED)} (those chosen) on the code of REV "
        f"(default {before_run.DEFAULT_BEFORE}) and show its figures beside this run's "
        f"(or {before_run.ENV}=REV; 'none': not)",
    )
    args = parser.parse_args(argv)
    full = wants_full(args.full, args.quick, os.environ)
    chosen = [b for b in BENCHMARKS if not args.names or b.name in args.names]
    runs: list[Ran] = []
    results: list[Result] = []
    for benchmark in chosen:
        ran = run_one(benchmark, quick=not full, agents=args.agents)
        runs.append(ran)
        results.extend(ran.results)
        write_results(results, args.results)
    rev = before_run.wanted(args.before, os.environ)
    again = before_run.compared(b.name for b in chosen)
    before = before_run.run(rev, again, full) if rev and again else None
    print(summary_table(runs, "full" if full else "quick", before))
    print(f"results: {args.results}")
    failed = [ran.name for ran in runs if ran.error]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
