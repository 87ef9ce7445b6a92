"""Learning that files under a folder changed: notifications, with polling as fallback.

On Linux, with the folder source's directories (each watched alone), inotify itself
through `inotify_simple` (the kernel's events, each with its kind; what they mean here is
`event_kind`): a file renamed into place (an atomic write) or closed by its writer is
passed on at once, without waiting for quiet; only files still being written (created or
modified, not closed yet) wait for the grouping step (10 ms of no further event, 1.6 s at
most), so a slow writer's half file is not read. Elsewhere, or without inotify (its
instance or watch limit reached), `watchfiles` (Rust `notify`) reports which paths
changed after its grouping step (the same 10 ms and 1.6 s: an atomic write waited 10-20
ms there); with `force_polling` (or WATCHFILES_FORCE_POLLING set, or where notifications
do not work) it polls file metadata itself. Events can still be lost (an inotify queue
overflow, a watch limit reached, a change made while the watch was being set up), so a
rescan runs at once on an overflow or a watched directory gone, once the watch is set up,
and then every `rescan_interval`. When the folder itself is removed or replaced (checked
every second: a watch follows the old inode) the watch is started again on the new one;
when the watcher fails the loop logs it once, rescans, and retries, backing off up to
`rescan_interval` while it keeps failing. The thread never dies of one bad pass:
`on_changes` raising is logged and the watch goes on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import watchfiles

if sys.platform == "linux":  # inotify is Linux's: elsewhere watchfiles alone
    from inotify_simple import INotify, flags

    # What the watch asks the kernel for (inotify(7)), and what each event says.
    WATCHED = (
        flags.MODIFY
        | flags.ATTRIB
        | flags.CLOSE_WRITE
        | flags.MOVED_FROM
        | flags.MOVED_TO
        | flags.CREATE
        | flags.DELETE
        | flags.DELETE_SELF
        | flags.MOVE_SELF
    )
    # Renamed into place, closed by its writer, gone, or a directory: read it now.
    WHOLE = flags.CLOSE_WRITE | flags.MOVED_TO | flags.MOVED_FROM | flags.DELETE | flags.ISDIR
    # A watched directory itself went away (removed, moved, its filesystem unmounted).
    GONE = flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED

INOTIFY = sys.platform == "linux"

log = logging.getLogger(__name__)

GROUPING_STEP_MS = 10  # watchfiles' default is 50 ms: most of a route's propagation time
GROUPING_MAX_MS = 1600  # a file written without pause for longer is read by then (watchfiles')
IDENTITY_CHECK_S = 1.0  # how often the inotify watch checks the folder was not replaced

OnChanges = Callable[[set[Path] | None], None]
"""Called with the paths that changed, or None for "rescan everything"."""


class EventKind(Enum):
    """What an inotify event says for the watch."""

    LOST = "lost"  # the queue overflowed: events were dropped
    GONE = "gone"  # a watched directory went away, its watch with it
    WHOLE = "whole"  # the entry can be read now: no writer is known to be at it
    WRITING = "writing"  # created or modified, not closed yet: wait for quiet


def event_kind(mask: int) -> EventKind:
    """The kind of an inotify event from its mask."""
    if mask & flags.Q_OVERFLOW:
        return EventKind.LOST
    if mask & GONE:
        return EventKind.GONE
    return EventKind.WHOLE if mask & WHOLE else EventKind.WRITING


class FolderWatch:
    """A thread calling `on_changes` when something under `directory` changed."""

    def __init__(
        self,
        directory: Path,
        on_changes: OnChanges,
        *,
        force_polling: bool | None = None,
        poll_interval: float = 0.2,
        rescan_interval: float = 10.0,
        directories: Callable[[], frozenset[Path]] | None = None,
    ) -> None:
        """`directories`, when given, are the directories to watch, each not recursively
        (the folder source's walk: directory symlinks not followed, so a link to `/usr`
        adds no watch and `sub/up -> ..` no loop); the watch restarts when they change.
        Without it, `directory` is watched recursively."""
        self._directory = directory
        self._directories = directories
        self._on_changes = on_changes
        self._force_polling = force_polling
        self._poll_interval = poll_interval
        self._rescan_interval = rescan_interval
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0  # watcher failures in a row
        # inotify is used while it works (Linux, the folder source's directories, no
        # polling asked for); its first failure to start hands over to watchfiles.
        polling = force_polling or (
            force_polling is None and os.environ.get("WATCHFILES_FORCE_POLLING")
        )
        self._inotify = INOTIFY and directories is not None and not polling
        self._wake_r, self._wake_w = os.pipe()  # stop() wakes the inotify wait through it

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="files-source", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (at once when waiting on inotify, within one 10 ms step on
        watchfiles); a second call does nothing."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._thread is None or not self._thread.is_alive():
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._watch()
                if self._stopped.wait(self._poll_interval):  # the watcher ended by itself
                    return
            except Exception:  # the watcher failed (folder gone, watch limit): retry
                self._failures += 1
                if self._failures == 1:  # once per streak, not every retry
                    log.exception("files source %s: watcher failed; retrying", self._directory)
                # Back off to the rescan interval while it keeps failing.
                wait = min(
                    self._poll_interval * 2 ** min(self._failures, 16), self._rescan_interval
                )
                if self._stopped.wait(wait):
                    return
                self._pass(None)

    def _watch(self) -> None:
        if self._inotify and self._directories is not None:
            watched = self._folder_identity()
            directories = self._directories()
            try:
                notify = INotify()
            except OSError as error:
                self._no_inotify(error)
            else:
                with notify:
                    watches: dict[int, Path] = {}  # watch descriptor -> its directory
                    try:
                        for directory in sorted(directories):
                            # Gone since the walk, or unreadable: the walk reports it.
                            with contextlib.suppress(
                                FileNotFoundError, NotADirectoryError, PermissionError
                            ):
                                path = Path(os.path.abspath(directory))
                                watches[notify.add_watch(path, WATCHED)] = path
                    except OSError as error:  # the watch limit, the kernel's memory
                        self._no_inotify(error)
                    else:
                        self._watch_inotify(notify, watches, watched, directories)
                        return
        self._watch_watchfiles()

    def _no_inotify(self, error: OSError) -> None:
        log.warning(
            "files source %s: cannot watch with inotify (%s); watching with watchfiles",
            self._directory,
            error,
        )
        self._inotify = False

    def _watch_inotify(
        self,
        notify: INotify,
        watches: dict[int, Path],
        watched: tuple[int, int] | None,
        directories: frozenset[Path],
    ) -> None:
        """Until the folder or its directories change, or stop(): pass what changed as
        soon as every changed file is whole (renamed into place, closed by its writer,
        removed), otherwise after the grouping step of quiet."""
        assert self._directories is not None
        self._pass(None)  # what changed before the watch was set up
        last_rescan = checked = time.monotonic()
        pending: dict[Path, bool] = {}  # path -> whole (its last event settled it)
        first = last = 0.0  # monotonic times of the first and last pending event
        waiting = select.poll()  # not select(): no limit on the descriptors' numbers
        waiting.register(notify.fileno(), select.POLLIN)
        waiting.register(self._wake_r, select.POLLIN)
        while not self._stopped.is_set():
            now = time.monotonic()
            if pending:
                timeout = min(last + GROUPING_STEP_MS / 1000, first + GROUPING_MAX_MS / 1000)
            else:
                timeout = min(last_rescan + self._rescan_interval, checked + IDENTITY_CHECK_S)
            waiting.poll(math.ceil(max(0.0, timeout - now) * 1000))
            if self._stopped.is_set():
                return
            gone = overflow = False
            for event in notify.read(timeout=0):  # [] when the wait timed out
                kind = event_kind(event.mask)
                directory = watches.get(event.wd)
                if kind is EventKind.LOST or directory is None:  # overflow: wd -1
                    overflow = True
                elif kind is EventKind.GONE:
                    gone = True
                else:
                    now = time.monotonic()
                    if not pending:
                        first = now
                    last = now
                    pending[directory / event.name] = kind is EventKind.WHOLE  # "": itself
            self._failures = 0
            now = time.monotonic()
            if overflow or gone:  # events lost, or a watched directory went: scan again
                pending.clear()
                self._pass(None)
                last_rescan = now
                if gone:
                    return
            if pending and (
                all(pending.values())
                or now >= last + GROUPING_STEP_MS / 1000
                or now >= first + GROUPING_MAX_MS / 1000
            ):
                paths = set(pending)
                pending.clear()
                self._pass(paths)
            if now - last_rescan >= self._rescan_interval:
                last_rescan = now
                self._pass(None)
            if now - checked >= IDENTITY_CHECK_S or not pending:
                checked = now
                if self._folder_identity() != watched:  # removed or replaced
                    self._pass(None)
                    return
                if self._directories() != directories:
                    return  # a directory came or went: watch the new set

    def _watch_watchfiles(self) -> None:
        # The first yield comes once the watch is set up (at most a second later): rescan
        # then for what changed before it, as after every `rescan_interval`.
        last_rescan: float | None = None
        watched = self._folder_identity()
        directories = self._directories() if self._directories is not None else None
        for changes in watchfiles.watch(
            *(sorted(directories) if directories else [self._directory]),
            recursive=directories is None,
            watch_filter=None,
            stop_event=self._stopped,
            force_polling=self._force_polling,
            poll_delay_ms=max(1, int(self._poll_interval * 1000)),
            step=GROUPING_STEP_MS,
            rust_timeout=max(1, int(min(self._rescan_interval, 1.0) * 1000)),
            yield_on_timeout=True,
            raise_interrupt=False,
            ignore_permission_denied=True,
        ):
            if self._stopped.is_set():
                return
            self._failures = 0
            if changes:
                self._pass({Path(path) for _, path in changes})
            now = time.monotonic()
            if last_rescan is None or now - last_rescan >= self._rescan_interval:
                last_rescan = now
                self._pass(None)
            if self._folder_identity() != watched:  # removed or replaced: watch the new one
                self._pass(None)
                return
            if self._directories is not None and self._directories() != directories:
                return  # a directory came or went: watch the new set

    def _folder_identity(self) -> tuple[int, int] | None:
        try:
            found = self._directory.stat()
        except OSError:
            return None
        return (found.st_dev, found.st_ino)

    def _pass(self, paths: set[Path] | None) -> None:
        try:
            self._on_changes(paths)
        except Exception:  # the watch must outlive any one bad pass
            log.exception("files source %s: pass failed; still watching", self._directory)
