"""`python -m tests.bench [NAME ...] [--quick]`: run benchmarks, print a table, write JSON.

Names: compute, fanout, haproxy, e2e, stability, churn, persistence, scale, agent_apply,
failover, retention (default: all, in that order).
Results go to tests/bench/results.json (entries of benchmarks not run this time are kept).
"""

from __future__ import annotations

import argparse
import importlib
import time
import traceback
from pathlib import Path

from tests.bench.common import RESULTS_PATH, Result, log, table, write_results

BENCHMARKS = {
    "compute": "tests.bench.compute",
    "fanout": "tests.bench.fanout",
    "haproxy": "tests.bench.haproxy",
    "e2e": "tests.bench.e2e",
    "stability": "tests.bench.stability",
    "churn": "tests.bench.churn",
    "persistence": "tests.bench.persistence",
    "scale": "tests.bench.scale",
    "agent_apply": "tests.bench.agent_apply",
    "failover": "tests.bench.failover",
    "retention": "tests.bench.retention",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], metavar="NAME")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--agents", type=int, default=None, help="fan-out: agent streams (default 1000)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS_PATH, help="JSON output file")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    results: list[Result] = []
    failed = []
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        log(f"== {name}")
        start = time.monotonic()
        try:
            scalable = name in ("fanout", "churn") and args.agents
            kwargs = {"agents": args.agents} if scalable else {}
            found: list[Result] = module.run(quick=args.quick, **kwargs)
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        log(f"== {name}: {time.monotonic() - start:.0f}s")
        results.extend(found)
        write_results(results, args.results)
    print(table(results))
    print(f"results: {args.results}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
