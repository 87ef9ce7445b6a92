"""The layers of both programs: every import runs down the stack, none runs back up.

docs/design.md, "Layers", gives the order and why. A module may import a module of its own
layer entry (its package, or itself) or of any layer below; a new package or module must be
given a place here before it can be imported by anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom first. Each entry is one layer: its modules and packages (dotted prefixes).
CONTROLPLANE: tuple[tuple[str, ...], ...] = (
    ("controlplane",),  # the package's own __init__: version only
    ("controlplane.logformat", "controlplane.metrics"),
    ("controlplane.changes",),  # what changed between two states of a source
    ("controlplane.model",),
    ("controlplane.snapshot",),
    ("controlplane.source",),
    ("controlplane.settings",),
    ("controlplane.routes",),
    ("controlplane.compute",),
    ("controlplane.ledger",),
    ("controlplane.publish",),
    ("controlplane.loop",),
    ("controlplane.server",),
    ("controlplane.kube",),
    ("controlplane.fleetstatus",),
    ("controlplane.cli",),
)
NODEAGENT: tuple[tuple[str, ...], ...] = (
    ("nodeagent",),
    ("nodeagent.logformat", "nodeagent.metrics", "nodeagent.safefile"),
    ("nodeagent.held",),
    ("nodeagent.haproxy",),
    ("nodeagent.config",),
    ("nodeagent.apply",),
    ("nodeagent.readiness", "nodeagent.report"),
    ("nodeagent.stream",),
    ("nodeagent.cli",),
    ("nodeagent.__main__",),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(top: str) -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / top).rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of `path`, in functions and TYPE_CHECKING too."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in known else base


def place(name: str, layers: Sequence[tuple[str, ...]]) -> tuple[int, str] | None:
    """(layer index, entry) of the longest entry `name` falls under, None when none."""
    found = [
        (len(entry), index, entry)
        for index, layer in enumerate(layers)
        for entry in layer
        if name == entry or name.startswith(entry + ".")
    ]
    if not found:
        return None
    _, index, entry = max(found)
    return index, entry


def violations(top: str, layers: Sequence[tuple[str, ...]]) -> list[str]:
    found = modules(top)
    known = set(found)
    out = []
    for name, path in found.items():
        where = place(name, layers)
        if where is None:
            out.append(f"{name}: in no layer of tests/shared/test_layers.py")
            continue
        for line, target in imports(name, path, known):
            if target.split(".")[0] not in ("controlplane", "nodeagent"):
                continue
            to = place(target, layers)
            if to is None or to[1] == where[1]:
                continue
            if to[0] >= where[0]:
                out.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target} (up)")
    return out


@pytest.mark.parametrize(
    ("top", "layers"), [("controlplane", CONTROLPLANE), ("nodeagent", NODEAGENT)]
)
def test_no_import_runs_back_up(top: str, layers: Sequence[tuple[str, ...]]) -> None:
    assert violations(top, layers) == []


@pytest.mark.parametrize(
    ("top", "forbidden"),
    [("controlplane", "nodeagent"), ("nodeagent", "controlplane"), ("proto/peerplane", "")],
)
def test_the_programs_share_only_the_peerplane_package(top: str, forbidden: str) -> None:
    """The control plane and the agent never import each other; `peerplane`, below both,
    imports neither."""
    tops = {forbidden} if forbidden else {"controlplane", "nodeagent"}
    found = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path in sorted((ROOT / top).rglob("*.py"))
        if not path.name.endswith("_pb2_grpc.py")
        for line, target in imports("peerplane.x", path, set())
        if target.split(".")[0] in tops
    ]
    assert found == []


def test_the_check_sees_every_form_of_import(tmp_path: Path) -> None:
    """Plain, `from`, relative and function-local imports are all read, and an import of a
    higher layer is placed above the importer's."""
    path = tmp_path / "table.py"
    path.write_text(
        "from . import names\nfrom ..compute import computer\n"
        "def late() -> None:\n    import controlplane.cli\n"
    )
    known = {"controlplane.routes.names", "controlplane.compute.computer"}
    found = [target for _, target in imports("controlplane.routes.table", path, known)]
    assert found == [
        "controlplane.routes.names",
        "controlplane.compute.computer",
        "controlplane.cli",
    ]
    low, high = (
        place("controlplane.routes.table", CONTROLPLANE),
        place("controlplane.cli", CONTROLPLANE),
    )
    assert low is not None and high is not None and low[0] < high[0]
