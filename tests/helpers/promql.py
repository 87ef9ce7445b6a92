"""Check PromQL expressions against a live `/metrics` scrape: every metric an expression
selects exists, and every label it matches on, groups by or joins on exists where it is
used.

No promtool here (no Prometheus binary on the machine): expressions are parsed with
`promql-parser` (PyPI, Python binding of the Rust parser GreptimeDB uses), which rejects
what Prometheus would reject at load time, and this module walks the tree. Labels are
followed through the tree the way Prometheus computes result labels: an aggregation
keeps its `by` labels (drops its `without` ones), `histogram_quantile` drops `le`,
`label_replace` adds its target, a binary operation keeps its left side's labels plus a
`group_left`'s. Target labels Prometheus adds at scrape time (`pod`, `instance`) are not
in a scrape, so an expression that uses them fails here on purpose: the rules and panels
use only the series' own labels.

Grafana's `$__rate_interval` (and other `$__` ranges) is replaced by `1m` before parsing,
and a `$variable` inside a matcher's quoted value is just a string to the parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import promql_parser as pq
from prometheus_client.parser import text_string_to_metric_families

SUFFIXES = {  # the series a family of each type exposes (prometheus_client's text format)
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}
GRAFANA_RANGE = re.compile(
    r"\$__(rate_interval|interval|range)\b|\$\{__(rate_interval|interval|range)\}"
)


@dataclass
class Live:
    """What scrapes expose: each series name with the label names seen on its samples
    (empty set for a declared family that has no sample yet), and its samples, each with
    the `pod` label Prometheus would add as the scraped target's (never in `labels`:
    expressions must not depend on how Prometheus is set up)."""

    labels: dict[str, set[str]] = field(default_factory=dict)
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    @classmethod
    def from_scrapes(cls, scrapes: dict[str, str]) -> Live:
        """`scrapes`: pod name -> its `/metrics` text."""
        live = cls()
        for pod, text in scrapes.items():
            for family in text_string_to_metric_families(text):
                for suffix in SUFFIXES.get(family.type, ("",)):
                    live.labels.setdefault(family.name + suffix, set())
                for sample in family.samples:
                    live.labels.setdefault(sample.name, set()).update(sample.labels)
                    live.samples.setdefault(sample.name, []).append(
                        ({**sample.labels, "pod": pod}, sample.value)
                    )
        return live

    def value(self, name: str, **labels: str) -> float:
        """The one sample of `name` whose labels include `labels` (summed if several)."""
        found = [v for ls, v in self.samples.get(name, []) if labels.items() <= ls.items()]
        assert found, f"no sample {name}{labels or ''} in the scrape"
        return sum(found)


@dataclass
class Checked:
    """One expression's result: its metric names and the problems found."""

    metrics: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def check(expr: str, live: Live) -> Checked:
    """Parse `expr` (a syntax error is a problem) and check it against `live`."""
    result = Checked()
    try:
        tree = pq.parse(GRAFANA_RANGE.sub("1m", expr))
    except ValueError as error:
        result.problems.append(f"does not parse: {error}")
        return result
    _Walk(live, result).labels(tree)
    return result


def label_values_query(query: str) -> tuple[str, str] | None:
    """Grafana's `label_values(METRIC, LABEL)` variable query: (metric expression, label)."""
    found = re.fullmatch(r"\s*label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query)
    return (found.group(1), found.group(2)) if found else None


class _Walk:
    def __init__(self, live: Live, result: Checked) -> None:
        self.live = live
        self.result = result

    def problem(self, text: str) -> None:
        self.result.problems.append(text)

    def need(self, names: Iterable[str], have: set[str], where: str) -> None:
        for name in names:
            if name not in have:
                self.problem(f"label {name!r} in {where}: not among {sorted(have)}")

    def labels(self, node: object) -> set[str]:
        """The label names of `node`'s result series, checking as it goes."""
        if isinstance(node, pq.VectorSelector):
            return self.selector(node)
        if isinstance(node, pq.MatrixSelector):
            return self.selector(node.vector_selector)
        if isinstance(node, pq.ParenExpr | pq.UnaryExpr | pq.SubqueryExpr):
            return self.labels(node.expr)
        if isinstance(node, pq.NumberLiteral | pq.StringLiteral):
            return set()
        if isinstance(node, pq.Call):
            return self.call(node)
        if isinstance(node, pq.AggregateExpr):
            return self.aggregate(node)
        if isinstance(node, pq.BinaryExpr):
            return self.binary(node)
        self.problem(f"unhandled node {type(node).__name__}: {node}")
        return set()

    def selector(self, node: pq.VectorSelector) -> set[str]:
        name = node.name
        if not name:
            self.problem(f"selector without a metric name: {node}")
            return set()
        self.result.metrics.add(name)
        if name not in self.live.labels:
            self.problem(f"metric {name!r} is not in the scrape")
            return set()
        have = self.live.labels[name]
        used = [m.name for m in node.matchers.matchers if m.name != "__name__"]
        self.need(used, have, f"a matcher of {name}")
        return set(have)

    def call(self, node: pq.Call) -> set[str]:
        func = node.func.name
        args = [self.labels(arg) for arg in node.args]
        if func == "histogram_quantile":
            self.need(["le"], args[1], "histogram_quantile (buckets)")
            return args[1] - {"le"}
        if func in ("label_replace", "label_join"):
            return args[0] | {node.args[1].val}
        if func in ("vector", "time", "scalar", "absent", "absent_over_time"):
            return set()
        return set().union(*args) if args else set()

    def aggregate(self, node: pq.AggregateExpr) -> set[str]:
        inner = self.labels(node.expr)
        op = str(node.op)
        modifier = node.modifier
        if modifier is None:
            return inner if op in ("topk", "bottomk", "limitk", "limit_ratio") else set()
        grouping = list(modifier.labels)
        if modifier.type == pq.AggModifierType.By:
            self.need(grouping, inner, f"{op} by (...)")
            return set(grouping)
        self.need(grouping, inner, f"{op} without (...)")
        return inner - set(grouping)

    def binary(self, node: pq.BinaryExpr) -> set[str]:
        lhs, rhs = self.labels(node.lhs), self.labels(node.rhs)
        op = str(node.op)
        modifier = node.modifier
        group: list[str] = []
        if modifier is not None and modifier.matching is not None:
            matching = list(modifier.matching.labels)
            if modifier.matching.type == pq.LabelModifierType.Include:  # on (...)
                self.need(matching, lhs, f"the left side of {op} on (...)")
                self.need(matching, rhs, f"the right side of {op} on (...)")
            else:  # ignoring (...): at least one side has it
                self.need(matching, lhs | rhs, f"{op} ignoring (...)")
        if modifier is not None:
            group = list(modifier.group_labels or ())
            if modifier.card == pq.VectorMatchCardinality.ManyToOne:
                self.need(group, rhs, f"group_left of {op}")
                return lhs | set(group)
            if modifier.card == pq.VectorMatchCardinality.OneToMany:
                self.need(group, lhs, f"group_right of {op}")
                return rhs | set(group)
        if op == "or":
            return lhs | rhs
        if isinstance(node.lhs, pq.NumberLiteral):
            return rhs
        return lhs


# ---------------------------------------------------------------- evaluation

Series = list[tuple[dict[str, str], float]]
COMPARISONS = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
AGGREGATIONS = {"sum": sum, "max": max, "min": min, "count": len}


class Unsupported(Exception):
    """An expression outside what `evaluate` knows (range functions need a history)."""


def evaluate(expr: str, samples: dict[str, Series]) -> Series:
    """Evaluate an instant `expr` on one scrape's `samples` (each sample's labels include
    the target label the scrape would get, `pod`): selectors with `=`/`=~`/`!=`
    matchers, sum/max/min/count with or without `by`/`without`, comparisons with a
    number (filters), and vector-to-vector comparisons matched on all labels. What a
    Prometheus rule evaluation gives at that instant, ignoring `for`."""
    return _evaluate(pq.parse(expr), samples)


def _evaluate(node: object, samples: dict[str, Series]) -> Series:
    if isinstance(node, pq.ParenExpr):
        return _evaluate(node.expr, samples)
    if isinstance(node, pq.VectorSelector):
        found = []
        for labels, value in samples.get(node.name or "", []):
            if all(_matches(m, labels.get(m.name, "")) for m in node.matchers.matchers):
                found.append((labels, value))
        return found
    if isinstance(node, pq.AggregateExpr) and str(node.op) in AGGREGATIONS:
        inner = _evaluate(node.expr, samples)
        groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
        for labels, value in inner:
            if node.modifier is None:
                kept: dict[str, str] = {}
            elif node.modifier.type == pq.AggModifierType.By:
                kept = {k: v for k, v in labels.items() if k in node.modifier.labels}
            else:
                kept = {k: v for k, v in labels.items() if k not in node.modifier.labels}
            groups.setdefault(tuple(sorted(kept.items())), []).append(value)
        fold = AGGREGATIONS[str(node.op)]
        return [(dict(key), float(fold(values))) for key, values in groups.items()]
    if isinstance(node, pq.BinaryExpr) and str(node.op) in COMPARISONS and not node.modifier:
        compare = COMPARISONS[str(node.op)]
        if isinstance(node.rhs, pq.NumberLiteral):
            limit = node.rhs.val
            return [(ls, v) for ls, v in _evaluate(node.lhs, samples) if compare(v, limit)]
        right = {tuple(sorted(ls.items())): v for ls, v in _evaluate(node.rhs, samples)}
        out = []
        for labels, value in _evaluate(node.lhs, samples):
            other = right.get(tuple(sorted(labels.items())))
            if other is not None and compare(value, other):
                out.append((labels, value))
        return out
    raise Unsupported(str(node))


def _matches(matcher: pq.Matcher, value: str) -> bool:
    op = matcher.op
    if op == pq.MatchOp.Equal:
        return value == matcher.value
    if op == pq.MatchOp.NotEqual:
        return value != matcher.value
    if op == pq.MatchOp.Re:
        return re.fullmatch(matcher.value, value) is not None
    raise Unsupported(f"matcher {matcher.name}{op}{matcher.value!r}")
