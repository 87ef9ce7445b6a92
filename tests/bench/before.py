"""The same benchmarks on an earlier revision, so one table shows before and after.

`python -m tests.bench --before REV` (`make bench` passes `BENCH_BEFORE`, by default
`DEFAULT_BEFORE`) runs, after the chosen benchmarks, those of them named in `COMPARED` once
more on the code of REV: `git archive REV` unpacked into a temporary folder, run there as
`python -m tests.bench NAME ... --results FILE` with that folder first on the import path
(its own `controlplane`, `nodeagent`, `peerplane` and benchmark code; the processes the
benchmarks start inherit the path), the same Python and installed packages. Its figures
are matched to this run's by name and parameters, and the summary shows them in a column
beside this run's (`summary.summary_table`). A benchmark REV does not have, or a figure it
does not print, shows no before value; a failed before run is reported, not raised.

Why a second run and not recorded figures: these machines are shared and noisy, so a
figure is only comparable with one measured in the same run, under the same load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.bench.common import Result, log

REPO = Path(__file__).resolve().parents[2]
# The code before issue 33's O(changed) route path and fast start (main on 2026-12-05).
DEFAULT_BEFORE = "6751a73"
# The benchmarks whose figures issue 33's targets are about; `--before` reruns only these
# (the others would double `make bench` for figures nobody compares).
COMPARED = ("route_table", "route_propagation", "scale")
ENV = "BENCH_BEFORE"  # a revision, or "none" to skip the before run


@dataclass
class Before:
    """The before run's outcome: its revision (as given and as resolved), its figures, and
    why it failed, if it did."""

    rev: str
    commit: str = ""
    results: list[Result] = field(default_factory=list)
    error: str = ""


def wanted(arg: str | None, environ: Mapping[str, str]) -> str | None:
    """The revision to compare with: `--before`, else `BENCH_BEFORE`; None for none
    ("" or "none")."""
    rev = arg if arg is not None else environ.get(ENV, "")
    return None if rev in ("", "none") else rev


def compared(names: Iterable[str]) -> list[str]:
    return [name for name in names if name in COMPARED]


def key(result: Result) -> tuple[str, str]:
    """A figure's identity within one run: its name and parameters."""
    return result.name, json.dumps(result.parameters, sort_keys=True, default=str)


class Matcher:
    """Finds each figure's counterpart in the before run: the figure of the same name
    whose parameters agree on the most values (parameters also carry measured values, an
    idle CPU or a reload count, which differ between runs), each used once."""

    def __init__(self, results: Sequence[Result]) -> None:
        self._by_name: dict[str, list[Result]] = {}
        for result in results:
            self._by_name.setdefault(result.name, []).append(result)
        self.used: set[tuple[str, str]] = set()

    def match(self, result: Result) -> Result | None:
        free = [r for r in self._by_name.get(result.name, ()) if key(r) not in self.used]
        if not free:
            return None

        def agreeing(other: Result) -> int:
            mine = result.parameters
            return sum(1 for k, v in other.parameters.items() if mine.get(k) == v)

        found = max(free, key=agreeing)
        self.used.add(key(found))
        return found


def resolve(rev: str) -> str:
    """The commit of `rev`; CalledProcessError when the repository does not have it."""
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def unpack(commit: str, into: Path) -> None:
    """The tree of `commit` under `into` (no .git: nothing of this checkout is touched)."""
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, stdout=out)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    archive.unlink()


def _environ(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(ENV, None)
    # The tree's packages before the editable install's finder (which maps to this checkout).
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "proto")])
    return env


def _results(path: Path) -> list[Result]:
    entries: list[dict[str, Any]] = json.loads(path.read_text()) if path.exists() else []
    return [
        Result(e["name"], float(e["value"]), e["unit"], dict(e.get("parameters") or {}))
        for e in entries
    ]


def run(rev: str, names: Sequence[str], full: bool) -> Before:
    """`names` run on the code of `rev`, in a subprocess; their figures."""
    before = Before(rev)
    try:
        before.commit = resolve(rev)
    except subprocess.CalledProcessError as err:
        before.error = f"no revision {rev!r} here: {err.stderr.strip()}"
        return before
    with tempfile.TemporaryDirectory(prefix="peerplane-before-") as tmp:
        unpack(before.commit, Path(tmp))
        tree = Path(tmp) / "tree"
        results = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "tests.bench", *names, "--full" if full else "--quick"]
        log(f"== before: {' '.join(names)} on {rev} ({before.commit[:12]})")
        done = subprocess.run(
            [*command, "--results", str(results)], cwd=tree, env=_environ(tree), check=False
        )
        before.results = _results(results)
        if done.returncode != 0:
            before.error = f"exit {done.returncode} on {rev}"
    return before
