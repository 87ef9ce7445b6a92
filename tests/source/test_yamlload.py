"""Composing in C (libyaml) gives what the bounded Python composer gives, limits included."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controlplane.source import yamlload
from controlplane.source.yamlload import LoadError, load_text
from tests.bench.scalefolder import service_file
from tests.source.test_files import HOSTILE_FILES

DEMO = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "demo"

pytestmark = pytest.mark.skipif(not yamlload.C_COMPOSE, reason="needs libyaml >= 0.2.6")

TEXTS = {
    **{path.name: path.read_text() for path in sorted(DEMO.glob("*.yaml"))},
    **HOSTILE_FILES,
    "service.yaml": service_file(7),
    "merge.yaml": "a: &a {x: 1}\nb: {<<: *a, y: [*a, *a]}\n---\n---\nc: 2\n",
    "shared-scalar.yaml": "a: &s text\nb: *s\nc: [*s, *s]\n",
}


def outcome(text: str) -> object:
    try:
        return load_text(text)
    except LoadError as err:
        return f"LoadError: {err}"


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_c_and_python_composing_agree(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    composed_in_c = outcome(TEXTS[name])
    monkeypatch.setattr(yamlload, "C_COMPOSE", False)
    assert composed_in_c == outcome(TEXTS[name])


def test_an_undefined_alias_is_a_load_error_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LoadError, match="found undefined alias"):
        load_text("a: *nowhere\n")
    monkeypatch.setattr(yamlload, "C_COMPOSE", False)
    with pytest.raises(LoadError, match="found undefined alias 'nowhere'"):
        load_text("a: *nowhere\n")


ANCHORED = "a: &a [" + ", ".join(["x"] * 999) + "]\nb: [" + ", ".join(["*a"] * 60) + "]\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: " + "[" * 101 + "]" * 101 + "\n", "nested deeper than 100 levels"),
        ("a: &a {b: [*a]}\n", "alias \\*a is used inside its own anchor"),
        (HOSTILE_FILES["alias-bomb.yaml"], "aliases expand to more than 100000 nodes"),
        # 60,000 nodes per document, under the bound; the file's 120,000 are not.
        (ANCHORED + "---\n" + ANCHORED, "aliases expand to more than 100000 nodes"),
    ],
)
def test_the_c_composed_graph_is_checked_before_construction(text: str, reason: str) -> None:
    with pytest.raises(yamlload._OverLimit):
        yamlload._load_c(text)
    with pytest.raises(LoadError, match=reason):
        load_text(text)
    assert load_text(ANCHORED)[0]["b"][59] == ["x"] * 999


def nested(levels: int) -> str:
    """A block mapping `levels` deep (the root map the first level), no anchor."""
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(levels - 1)) + "  " * (levels - 1) + "v\n"


@pytest.mark.parametrize("anchor", ["", "top: &t 1\n"])
def test_the_depth_limit_is_the_same_with_or_without_an_anchor(anchor: str) -> None:
    """A text without an anchor has only its depth checked (no node is shared), one with
    an anchor its whole graph: the limit is the same, 100 levels of maps and lists (the
    scalar at the bottom one of them), and so is the error, both ways of composing."""
    assert load_text(anchor + nested(100))[0]["k0"]
    for text in (anchor + nested(101), anchor + "a: " + "[" * 100 + "]" * 100 + "\n"):
        with pytest.raises(yamlload._OverLimit):
            yamlload._load_c(text)
        with pytest.raises(LoadError, match="nested deeper than 100 levels"):
            load_text(text)


def test_a_tree_left_to_safe_constructor_has_its_depth_checked_first() -> None:
    """The plain construction checks the depth as it builds; a document it leaves to
    SafeConstructor (a `!!set` met before the deep branch) is checked before that one
    recurses."""
    text = "s: !!set {a: null}\n" + nested(101)
    with pytest.raises(yamlload._OverLimit):
        yamlload._load_c(text)
    with pytest.raises(LoadError, match="nested deeper than 100 levels"):
        load_text(text)
    assert load_text("s: !!set {a: null}\n" + nested(100))[0]["s"] == {"a"}


def test_remembered_scalar_tags_are_those_resolving_gives() -> None:
    """The same words plain and quoted resolve to different tags: each is remembered
    with how it was written, loaded again from memory as SafeLoader loads it."""
    words = ["true", "1", "1.5", "null", "~", "2026-01-01", "0x1F", "yes", "text", ""]
    text = "".join(f"p{n}: {w}\nq{n}: '{w}'\n" for n, w in enumerate(words) if w) + "e: ''\n"
    expected = yaml.safe_load(text)
    assert load_text(text) == [expected]
    assert load_text(text) == [expected]  # every short scalar's tag remembered now
    assert expected["p0"] is True and expected["q0"] == "true" and expected["p1"] == 1


def test_a_fifo_in_place_of_a_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    """A manifest swapped with a FIFO froze the folder source for good: `serve` sat in
    `openat` waiting for a writer after 15,150 swaps in 4.8 s, health still SERVING.
    `load_file` opens without blocking and checks the type of what it opened (fstat), so a
    FIFO (or a device) met between the scan and the open is an error, at once."""
    import os
    import threading

    fifo = tmp_path / "svc.yaml"
    os.mkfifo(fifo)
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_load(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    if reader.is_alive():  # blocked in open: a writer opening the FIFO releases it
        os.close(os.open(fifo, os.O_WRONLY))
        reader.join(timeout=10)
        pytest.fail("load_file blocked opening a FIFO")
    assert outcome == ["not a regular file (a FIFO); not read"]


def _load(path: Path) -> object:
    try:
        return yamlload.load_file(path)
    except LoadError as err:
        return str(err)
