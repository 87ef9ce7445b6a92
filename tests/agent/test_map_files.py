"""The route map files the agent writes beside haproxy.cfg (`nodeagent/apply/files.py`):
after a runtime change a file's lines are patched with the change's entries, not rendered
again from all of them, and the bytes are always what a whole render writes.

docs/design.md, "Route rendering and runtime updates"."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from nodeagent.apply import files as files_module
from nodeagent.apply.files import HAProxyFiles
from nodeagent.config.changes import map_updates
from nodeagent.config.listeners import map_file
from nodeagent.haproxy.commands import MapUpdate

pytestmark = pytest.mark.unit


def _files(tmp_path: Path) -> tuple[HAProxyFiles, str]:
    maps = tmp_path / "maps"
    return HAProxyFiles(str(tmp_path / "haproxy.cfg"), str(maps)), f"{maps}/fe_80.prefix.map"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_patched_map_files_are_what_a_whole_render_writes(tmp_path: Path, seed: int) -> None:
    """Random adds, re-points and removals, written with the runtime commands that made
    them (patched), without them (a reload: whole), or with commands that do not lead to
    the entries (whole again): the file is `map_file` of the entries every time."""
    rng = random.Random(seed)
    files, path = _files(tmp_path)
    entries: dict[str, str] = {}
    for step in range(60):
        new = dict(entries)
        for _ in range(rng.randint(1, 4)):
            key = f"h{rng.randrange(40)}.example.com/p{rng.randrange(3)}/"
            if key in new and rng.random() < 0.4:
                del new[key]
            else:
                new[key] = f"{rng.randint(1, 9)}:ns_{rng.choice('abc')}_80"
        found = map_updates({path: entries}, {path: new})
        assert found is not None
        updates: tuple[MapUpdate, ...] = found
        if step % 7 == 3:
            updates = ()  # a reload's write: no commands
        elif step % 11 == 5:
            updates = (*updates, MapUpdate(path, "del", "missing.example.com/"))  # no fit
        files.write_maps({path: new}, {path: entries}, updates)
        assert Path(path).read_bytes() == map_file(new), step
        entries = new


def test_a_runtime_change_formats_only_its_own_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One route added to 10,000: the file's lines are those last written with one line
    inserted (no line of the other 10,000 formatted again), and a file that did not hold
    the entries the commands start from is written whole."""
    files, path = _files(tmp_path)
    entries = {f"h{n}.example.com/": "1:ns_a_80" for n in range(10_000)}
    files.write_maps({path: entries}, {})
    whole: list[int] = []
    render = files_module.MapLines.__init__

    def counted(self: files_module.MapLines, given: dict[str, str]) -> None:
        whole.append(len(given))
        render(self, given)

    monkeypatch.setattr(files_module.MapLines, "__init__", counted)
    new = {**entries, "h5000a.example.com/": "1:ns_b_80"}
    updates = map_updates({path: entries}, {path: new})
    assert updates is not None and len(updates) == 1
    # `before` an equal copy of what was written (a render since that wrote nothing)
    files.write_maps({path: new}, {path: dict(entries)}, updates)
    assert whole == []
    assert Path(path).read_bytes() == map_file(new)
    # From entries the file does not hold (another base): whole.
    other = {**entries, "x.example.com/": "1:ns_c_80"}
    moved = map_updates({path: entries}, {path: other})
    assert moved is not None
    files.write_maps({path: other}, {path: entries}, moved)
    assert whole == [len(other)]
    assert Path(path).read_bytes() == map_file(other)
