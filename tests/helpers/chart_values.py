"""The chart's values table, made from values.yaml's comments: a line `# -- TEXT` (and the
`#` lines after it) documents the key below it, as helm-docs reads them.

    python -m tests.helpers.chart_values           # print the table
    python -m tests.helpers.chart_values --write   # rewrite it in docs/operations.md

docs/operations.md holds the table between the two marker lines below; a test fails when
it differs from what values.yaml says (`make chart-docs` rewrites it).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "deploy" / "chart" / "peerplane" / "values.yaml"
DOCS = ROOT / "docs" / "operations.md"
BEGIN = "<!-- values table: made from deploy/chart/peerplane/values.yaml (make chart-docs) -->"
END = "<!-- end of values table -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?: |$)")
DOC_START = "# -- "


@dataclass(frozen=True)
class Row:
    key: str  # dotted path
    kind: str
    default: Any
    doc: str


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _lookup(values: Any, path: list[str]) -> Any:
    for part in path:
        values = values[part]
    return values


def rows(text: str) -> list[Row]:
    """One row per documented key, in the file's order."""
    values = yaml.safe_load(text)
    found: list[Row] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(DOC_START):
            pending = [stripped[len(DOC_START) :]]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if not match:
            if stripped:
                pending = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending is not None:
            path = [key for _, key in stack]
            value = _lookup(values, path)
            found.append(Row(".".join(path), _kind(value), value, " ".join(pending)))
            pending = None
    return found


def undocumented(text: str) -> list[str]:
    """Leaf keys documented neither by themselves nor by a key above them."""
    documented = {row.key for row in rows(text)}
    missing: list[str] = []

    def walk(node: Any, path: list[str]) -> None:
        key = ".".join(path)
        if path and key in documented:
            return
        if isinstance(node, dict) and node:
            for child, value in node.items():
                walk(value, [*path, str(child)])
        elif path:
            missing.append(key)

    walk(yaml.safe_load(text), [])
    return missing


def table(text: str) -> str:
    lines = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for row in rows(text):
        default = json.dumps(row.default, separators=(", ", ": "))
        cells = (f"`{row.key}`", row.kind, f"`{default}`", row.doc)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"


def with_table(docs: str, values_text: str) -> str:
    """`docs` with the text between the markers replaced by the table."""
    start = docs.index(BEGIN) + len(BEGIN)
    end = docs.index(END)
    return docs[:start] + "\n" + table(values_text) + docs[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite the table in {DOCS}")
    args = parser.parse_args()
    text = VALUES.read_text()
    if args.write:
        DOCS.write_text(with_table(DOCS.read_text(), text))
    else:
        print(table(text), end="")


if __name__ == "__main__":
    main()
