"""`FolderWatch` with inotify: a file renamed into place or closed by its writer is passed
on without waiting for the grouping step; a file still open for writing waits for it; an
overflow or a watched directory gone is a rescan."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import inotify_simple
import pytest

from controlplane.source import folder_watch
from controlplane.source.folder_watch import EventKind, FolderWatch, event_kind
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(not folder_watch.INOTIFY, reason="inotify is Linux's")

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


@contextlib.contextmanager
def watching(folder: Path, directories: frozenset[Path]) -> Iterator[Passes]:
    """A watch of `directories` (each alone), set up."""
    passes = Passes()
    watcher = FolderWatch(folder, passes, rescan_interval=3600, directories=lambda: directories)
    watcher.start()
    try:
        wait_until(lambda: passes.rescans() >= 1, 10, "the watch to be set up")
        yield passes
    finally:
        watcher.stop()
        watcher.stop()  # a second stop does nothing (its wake-up pipe is closed)
    assert not [t for t in threading.enumerate() if t.name == "files-source"]


@pytest.fixture
def watch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Passes]:
    monkeypatch.setattr(folder_watch, "GROUPING_STEP_MS", LONG_STEP_MS)
    monkeypatch.setattr(folder_watch, "GROUPING_MAX_MS", LONG_STEP_MS)
    with watching(tmp_path, frozenset({tmp_path})) as passes:
        yield passes


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


@pytest.mark.parametrize(
    ("mask", "kind"),
    [
        (inotify_simple.flags.MOVED_TO, EventKind.WHOLE),  # an atomic write's rename
        (inotify_simple.flags.CLOSE_WRITE, EventKind.WHOLE),
        (inotify_simple.flags.MOVED_FROM, EventKind.WHOLE),  # gone: nothing to wait for
        (inotify_simple.flags.DELETE, EventKind.WHOLE),
        (inotify_simple.flags.CREATE | inotify_simple.flags.ISDIR, EventKind.WHOLE),
        (inotify_simple.flags.CREATE, EventKind.WRITING),  # its writer may be at it
        (inotify_simple.flags.MODIFY, EventKind.WRITING),
        (inotify_simple.flags.ATTRIB, EventKind.WRITING),
        (inotify_simple.flags.Q_OVERFLOW, EventKind.LOST),
        (inotify_simple.flags.IGNORED, EventKind.GONE),  # the watch was removed
        (inotify_simple.flags.DELETE_SELF, EventKind.GONE),
        (inotify_simple.flags.MOVE_SELF, EventKind.GONE),
    ],
)
def test_each_event_says_whether_the_file_is_whole(mask: int, kind: EventKind) -> None:
    assert event_kind(mask) is kind


def test_a_watched_directory_removed_is_a_rescan(tmp_path: Path) -> None:
    """Its watch goes with it (IN_DELETE_SELF, IN_IGNORED): what changed under it since
    is learned by a rescan, and the watch starts again."""
    sub = tmp_path / "sub"
    sub.mkdir()
    with watching(tmp_path, frozenset({tmp_path, sub})) as passes:
        sub.rmdir()
        wait_until(lambda: passes.rescans() >= 2, 10, "the rescan of the removed directory")
        wait_until(lambda: passes.rescans() >= 3, 10, "the watch started again")


class OverflowingINotify:
    """An inotify instance whose queue overflowed: its first read says events were lost."""

    made: list[OverflowingINotify] = []  # noqa: RUF012 (the instances of one test)

    def __init__(self) -> None:
        self.made.append(self)
        self.readable, self.signal = os.pipe()
        os.write(self.signal, b"x")
        self.overflowed = False

    def add_watch(self, path: Path, mask: int) -> int:
        return 1

    def fileno(self) -> int:
        return self.readable

    def read(self, timeout: int) -> list[inotify_simple.Event]:
        if self.overflowed:
            return []
        self.overflowed = True
        os.read(self.readable, 1)
        return [inotify_simple.Event(-1, inotify_simple.flags.Q_OVERFLOW, 0, "")]

    def __enter__(self) -> OverflowingINotify:
        return self

    def __exit__(self, *_: object) -> None:
        os.close(self.readable)
        os.close(self.signal)


def test_an_overflow_is_a_rescan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel dropped events (its queue is 16,384 deep): only a rescan finds them."""
    monkeypatch.setattr(OverflowingINotify, "made", [])
    monkeypatch.setattr(folder_watch, "INotify", OverflowingINotify)
    with watching(tmp_path, frozenset({tmp_path})) as passes:
        wait_until(lambda: passes.rescans() >= 2, 10, "the rescan after the overflow")
        assert len(OverflowingINotify.made) == 1  # the watch goes on: no watch was lost


def test_without_inotify_the_watch_falls_back_to_watchfiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No inotify instance to be had (the per-user limit reached): said once, and changes
    still come, from watchfiles."""

    def no_instance() -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(folder_watch, "INotify", no_instance)
    with watching(tmp_path, frozenset({tmp_path})) as passes:
        target = tmp_path / "route.yaml"
        target.write_text("kind: HTTPRoute\n")
        wait_until(lambda: passes.named(target), 10, "the written file's pass")
    assert "cannot watch with inotify" in caplog.text
