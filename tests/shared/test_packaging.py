"""Every Python package of the tree is declared in pyproject.toml: an editable install
finds undeclared subpackages anyway, a wheel (the image) silently leaves them out."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_declared() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(config["packages"])
    roots = {"controlplane": ROOT / "controlplane", "nodeagent": ROOT / "nodeagent"}
    roots |= {name: ROOT / where for name, where in config["package-dir"].items()}
    found = set()
    for name, where in roots.items():
        for init in where.rglob("__init__.py"):
            relative = init.parent.relative_to(where)
            found.add(".".join((name, *relative.parts)) if relative.parts else name)
    assert found == declared, f"undeclared: {sorted(found - declared)}"
