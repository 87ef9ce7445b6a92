"""Files mode's slot ledger (`--state FILE`): SQLite, one row per backend.

A step writes only the rows of the backends it changed, in one transaction (WAL,
synchronous=FULL): a few KiB per change whatever the cluster's size, and SIGKILL at any
moment leaves the last committed step. SQLite is in the standard library; it beats one
file per backend (thousands of files, a directory fsync per change) and the JSON file
earlier versions wrote whole on every change (2.3 MB per change at 2,000 Services).

That JSON file is still read: a `--state` path holding JSON (format 1 or 2) is loaded, and
the first save replaces it atomically with the database (no slot moves). What the path
holds is checked on the opened descriptor, never blocking: a FIFO or a directory is
refused, and so is a file that exists but cannot be read (EACCES, EIO): starting fresh then
would move every client. Only an absent file starts fresh. A file whose content is corrupt
is kept aside (`FILE.corrupt`), reported, and its backends rebuilt.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Collection
from pathlib import Path

from controlplane.ledger.codec import (
    MAX_LEDGER_BYTES,
    STATE_FORMAT,
    StateError,
    assignment_from_json,
    backend_from_json,
    backend_text,
    parse_json,
)
from controlplane.ledger.store import LedgerWriteError, Since, changes, names_to_compare
from controlplane.snapshot import BackendSlots, SlotAssignment

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS backends (name TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class LedgerReadError(Exception):
    """The ledger exists but cannot be read: refuse to start rather than rebuild."""


def _peek(path: Path) -> tuple[bytes, int] | None:
    """The first bytes of `path` and its size, or None when it does not exist. Opened
    without blocking (a FIFO would block `open` until a writer comes) and checked on the
    descriptor, so a swap between a check and the open cannot fool it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise LedgerReadError(f"--state {path}: cannot open: {err.strerror}") from err
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LedgerReadError(f"--state {path}: not a regular file")
        try:
            head = os.read(fd, len(SQLITE_MAGIC))
            if not head.startswith(SQLITE_MAGIC):  # JSON of earlier versions: all of it
                while len(head) <= MAX_LEDGER_BYTES and (chunk := os.read(fd, 1 << 20)):
                    head += chunk  # past the limit parse_json refuses it unparsed
        except OSError as err:
            raise LedgerReadError(f"--state {path}: cannot read: {err.strerror}") from err
        return head, info.st_size
    finally:
        os.close(fd)


def check_state_path(path: Path) -> None:
    """Refuse at startup a `--state` path that exists but cannot be the ledger (a FIFO, a
    directory, unreadable): LedgerReadError says why. Absent is fine (created on save)."""
    _peek(path)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(path: Path, err: BaseException) -> LedgerWriteError:
    """A failed write as the reconcile loop reports it: one stable cause per kind."""
    text = str(err)
    if isinstance(err, OSError):
        text = err.strerror or text
        permanent = err.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR)
        cause = {errno.ENOSPC: "disk-full", errno.EROFS: "read-only"}.get(
            err.errno or 0, "not-writable" if permanent else "io-error"
        )
    else:
        lowered = text.lower()
        permanent = "readonly" in lowered or "unable to open" in lowered
        cause = "disk-full" if "full" in lowered else "not-writable" if permanent else "io-error"
    return LedgerWriteError(f"--state {path}: {text}", cause=cause, permanent=permanent)


class FileLedger:
    """The slot ledger in SQLite file `path` (created on the first save)."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._db: sqlite3.Connection | None = None
        self._saved: dict[str, BackendSlots] = {}
        self._replace_file = False  # the path holds JSON or junk: the first save replaces it
        self._last: SlotAssignment | None = None  # the assignment `_saved` holds as is

    # ------------------------------------------------------------------ load

    def load(self) -> tuple[SlotAssignment, list[str]]:
        self._saved, self._replace_file, self._last = {}, False, None
        peeked = _peek(self.path)
        if peeked is None:
            return {}, []
        head, size = peeked
        if head.startswith(SQLITE_MAGIC):
            return self._load_database()
        self._replace_file = True
        if size == 0:
            return {}, [f"{self.path}: empty; slots rebuilt from sorted order"]
        data, problem = parse_json(head)
        if problem is not None:
            self._keep_aside()
            return {}, [f"{self.path}: {problem}; slots rebuilt from sorted order"]
        assignment, errors = assignment_from_json(data, self._clock())
        problems = [f"{self.path}: {e}" for e in errors]
        if assignment or not errors:
            log.info("slot ledger %s is JSON: the first save migrates it to SQLite", self.path)
        else:
            self._keep_aside()
        return assignment, problems

    def _load_database(self) -> tuple[SlotAssignment, list[str]]:
        try:
            db = self._connect(self.path)
            rows = db.execute("SELECT name, doc FROM backends").fetchall()
        except sqlite3.DatabaseError as err:
            if isinstance(err, sqlite3.OperationalError):  # locked, unreadable, I/O
                raise LedgerReadError(f"--state {self.path}: {err}") from err
            self._close()
            self._keep_aside()
            self._replace_file = True
            return {}, [f"{self.path}: not a usable database ({err}); slots rebuilt"]
        now = self._clock()
        assignment: dict[str, BackendSlots] = {}
        problems: list[str] = []
        for name, doc in rows:
            data, problem = parse_json(doc)
            try:
                if problem is not None:
                    raise StateError(f"backend {name!r}: {problem}")
                assignment[str(name)] = backend_from_json(str(name), data, STATE_FORMAT, now)
            except StateError as err:
                problems.append(f"{self.path}: slot state dropped: {err}")
        self._saved = dict(assignment)
        self._last = assignment
        return assignment, problems

    def _keep_aside(self) -> None:
        """Keep a corrupt file for the operator before the first save replaces it."""
        aside = self.path.with_name(self.path.name + ".corrupt")
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)
            log.warning("slot ledger %s kept aside as %s", self.path, aside)

    # ------------------------------------------------------------------ save

    def save(self, assignment: SlotAssignment, since: Since | None = None) -> None:
        names = names_to_compare(since, self._last)
        self._last = None  # until this save is whole
        try:
            if self._db is None and not self._replace_file:  # saved before any load
                peeked = _peek(self.path)
                self._replace_file = peeked is None or not peeked[0].startswith(SQLITE_MAGIC)
            if self._replace_file:
                self._create(assignment)
            else:
                self._update(assignment, names)
        except (OSError, sqlite3.Error) as err:
            raise _write_error(self.path, err) from err
        self._last = assignment

    def dirty(self) -> bool:
        return False  # one writer: nothing else edits the file under us

    def _update(self, assignment: SlotAssignment, names: Collection[str] | None = None) -> None:
        todo = changes(self._saved, assignment, names=names)
        if not todo:
            return
        db = self._db if self._db is not None else self._connect(self.path)
        with db:  # one transaction: commit, or roll back on any error
            db.executemany(
                "INSERT OR REPLACE INTO backends (name, doc) VALUES (?, ?)",
                [(name, backend_text(slots)) for name, slots in todo.written.items()],
            )
            db.executemany("DELETE FROM backends WHERE name = ?", [(n,) for n in todo.deleted])
        self._saved.update(todo.written)
        for name in todo.deleted:
            self._saved.pop(name, None)

    def _create(self, assignment: SlotAssignment) -> None:
        """A new database with every backend, put in place with one rename: a crash leaves
        the old file (JSON, say) or the new database, never neither."""
        self._close()
        tmp = self.path.with_name(f".{self.path.name}.new")
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm"), Path(f"{tmp}-journal")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(tmp, isolation_level=None, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=DELETE")
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute("BEGIN")
            db.execute("INSERT INTO meta VALUES ('format', ?)", (str(STATE_FORMAT),))
            db.executemany(
                "INSERT INTO backends (name, doc) VALUES (?, ?)",
                [(name, backend_text(slots)) for name, slots in sorted(assignment.items())],
            )
            db.execute("COMMIT")
        finally:
            db.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        _fsync_directory(self.path)
        self._replace_file = False
        self._connect(self.path)
        self._saved = dict(assignment)

    def _connect(self, path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, isolation_level="DEFERRED", check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            for statement in _SCHEMA:
                db.execute(statement)
            db.commit()
        except BaseException:
            db.close()
            raise
        self._db = db
        return db

    def _close(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def close(self) -> None:
        """Checkpoint the WAL into the file and release it (on stop)."""
        self._close()


def ledger_document(path: Path) -> dict[str, object]:
    """The ledger in `path` as one JSON document (codec's form), rows as stored: for
    operators (`sqlite3 FILE 'select * from backends'` shows the same) and tests."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        rows = db.execute("SELECT name, doc FROM backends ORDER BY name").fetchall()
    return {"format": STATE_FORMAT, "backends": {name: json.loads(doc) for name, doc in rows}}
