"""`FolderWatch` with inotify: a file renamed into place or closed by its writer is passed
on without waiting for the grouping step; a file still open for writing waits for it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from controlplane.source import folder_watch, inotify
from controlplane.source.folder_watch import FolderWatch
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(not inotify.available(), reason="inotify is Linux's")

# Far longer than any wait below: a pass that came waited for no grouping step.
LONG_STEP_MS = 60_000


class Passes:
    """The paths of each pass (None: rescan everything), from the watch's thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: list[set[Path] | None] = []

    def __call__(self, paths: set[Path] | None) -> None:
        with self.lock:
            self.paths.append(paths)

    def named(self, path: Path) -> bool:
        with self.lock:
            return any(p is not None and path in p for p in self.paths)

    def rescans(self) -> int:
        with self.lock:
            return sum(p is None for p in self.paths)


@pytest.fixture
def watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(folder_watch, "GROUPING_STEP_MS", LONG_STEP_MS)
    monkeypatch.setattr(folder_watch, "GROUPING_MAX_MS", LONG_STEP_MS)
    passes = Passes()
    watcher = FolderWatch(
        tmp_path, passes, rescan_interval=3600, directories=lambda: frozenset({tmp_path})
    )
    watcher.start()
    wait_until(lambda: passes.rescans() >= 1, 10, "the watch to be set up")
    yield passes
    watcher.stop()
    watcher.stop()  # a second stop does nothing (its wake-up pipe is closed)
    assert not [t for t in threading.enumerate() if t.name == "files-source"]


def test_a_rename_into_place_is_passed_without_waiting_for_the_grouping_step(
    tmp_path: Path, watch: Passes
) -> None:
    """An atomic write (a temporary file, then a rename) waited watchfiles' grouping step,
    10-20 ms of a new route's propagation: the rename says the file is whole."""
    temporary, target = tmp_path / ".route.yaml.tmp", tmp_path / "route.yaml"
    temporary.write_text("kind: HTTPRoute\n")
    os.replace(temporary, target)
    wait_until(lambda: watch.named(target), 10, "the renamed file's pass")


def test_a_file_closed_by_its_writer_is_passed_at_once(tmp_path: Path, watch: Passes) -> None:
    target = tmp_path / "route.yaml"
    target.write_text("kind: HTTPRoute\n")  # create, write, close
    wait_until(lambda: watch.named(target), 10, "the written file's pass")


def test_a_file_still_open_for_writing_waits_until_its_writer_closes_it(
    tmp_path: Path, watch: Passes
) -> None:
    """Half a file is not read: created and written but not closed, it waits for quiet
    (here far longer than the test); its close passes it on."""
    target = tmp_path / "route.yaml"
    with target.open("w") as stream:
        stream.write("kind: HTTP")
        stream.flush()
        os.fsync(stream.fileno())
        time.sleep(0.3)  # long enough for a pass that did not wait
        assert not watch.named(target)
        stream.write("Route\n")
    wait_until(lambda: watch.named(target), 10, "the closed file's pass")
