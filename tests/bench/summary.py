"""The table `python -m tests.bench` prints at the end: one row per figure, its target.

A benchmark module may declare `TARGETS`, a dict from a figure-name pattern (`fnmatch`:
`*` matches across dots) to the target or reference text shown beside every figure it
matches (the first pattern that matches wins). The text says at what size the target is
set, since `--quick` measures at smaller ones.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tests.bench.before import Before, Matcher, key
from tests.bench.common import Result, fmt_value, machine


@dataclass
class Ran:
    """One benchmark's part of a run: its figures, wall time and failure, if any."""

    name: str
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    error: str = ""
    targets: Mapping[str, str] = field(default_factory=dict)


def target_for(figure: str, targets: Mapping[str, str]) -> str:
    """The target text of the first pattern `figure` matches; "" when none does."""
    for pattern, text in targets.items():
        if fnmatch.fnmatchcase(figure, pattern):
            return text
    return ""


def _figure(benchmark: str, name: str) -> str:
    return name.removeprefix(f"{benchmark}.")


def _params(parameters: Mapping[str, object], first: set[str], width: int = 50) -> str:
    """The parameters, those in `first` (what tells apart figures of one name) first."""
    keys = sorted((k for k in parameters if k != "what"), key=lambda k: k not in first)
    text = " ".join(f"{k}={parameters[k]}" for k in keys)
    return text if len(text) <= width else text[: width - 3] + "..."


def _differing(results: Sequence[Result]) -> dict[str, set[str]]:
    """Per figure name given more than once: the parameters whose values differ."""
    seen: dict[str, list[Result]] = {}
    for r in results:
        seen.setdefault(r.name, []).append(r)
    return {
        name: {
            k
            for r in group
            for k in r.parameters
            if len({repr(other.parameters.get(k)) for other in group}) > 1
        }
        for name, group in seen.items()
        if len(group) > 1
    }


def summary_table(runs: Sequence[Ran], size: str, before: Before | None = None) -> str:
    """Every figure of `runs` as an aligned table (benchmark, figure, value, unit, target,
    parameters), machine facts and the size on top, wall times and failures below. With
    `before` (the same benchmarks on an earlier revision, `before.py`), a column of its
    value for each figure (`before.Matcher`: the same name, the most parameters agreeing),
    and its figures this run lacks after them."""
    facts = machine()
    head: tuple[str, ...] = (
        "benchmark",
        "figure",
        "value",
        "unit",
        "target / reference",
        "parameters",
    )
    differing = _differing([r for ran in runs for r in ran.results])
    matcher = Matcher(before.results if before else ())

    def was(r: Result) -> tuple[str, ...]:
        if before is None:
            return ()
        found = matcher.match(r)
        return (fmt_value(found.value) if found else "-",)

    rows = [
        (
            ran.name,
            _figure(ran.name, r.name),
            *was(r),
            fmt_value(r.value),
            r.unit,
            target_for(r.name, ran.targets),
            _params(r.parameters, differing.get(r.name, set())),
        )
        for ran in runs
        for r in ran.results
    ]
    rows += [
        (ran.name, "FAILED", *(("-",) if before else ()), "-", "-", "-", ran.error[:50])
        for ran in runs
        if ran.error
    ]
    if before is not None:
        head = (*head[:2], f"before ({before.rev})", "after", *head[3:])
        targets = {ran.name: ran.targets for ran in runs}
        for r in before.results:
            if key(r) not in matcher.used:
                name = next((n for n in targets if r.name.startswith(n)), r.name.split(".")[0])
                rows.append(
                    (
                        name,
                        _figure(name, r.name),
                        fmt_value(r.value),
                        "-",
                        r.unit,
                        target_for(r.name, targets.get(name, {})),
                        _params(r.parameters, set()),
                    )
                )
        if before.error:
            rows.append(("before", "FAILED", "-", "-", "-", "-", before.error[:50]))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=False)]
    numeric = {2, 3} if before is not None else {2}
    lines = [f"{size} run; machine: {facts['cores']} cores, Python {facts['python']}"]
    for row in (head, *rows):
        lines.append(
            "  ".join(
                cell.rjust(w) if i in numeric else cell.ljust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if row is head:
            lines.append("  ".join("-" * w for w in widths))
    total = sum(ran.seconds for ran in runs)
    times = ", ".join(f"{ran.name} {ran.seconds:.0f} s" for ran in runs)
    lines.append(f"wall time: {total:.0f} s ({times})")
    return "\n".join(lines)
