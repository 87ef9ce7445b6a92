"""The saved snapshot: what the agent restores on start, before the control plane answers.

Kept as a base and a journal (docs/design.md, "The saved snapshot: a base and a journal"):
`snapshot.binpb`, a whole snapshot (the deterministic serialization, as before), and
`snapshot.journal`, the changes since, one delta record appended per applied version
(`journal.py`), each with an fsync before the ACK. A runtime change at 8,000 Services
appends about a kilobyte instead of rewriting 8 MB. Every `MAX_RECORDS` records, or once
the journal outgrows a quarter of the base, the next save writes a new base (atomically:
temp file, fsync, rename, fsync of the directory) and then resets the journal to that
base. A crash at any point leaves a loadable state: the old base with its journal, the new
base alone (its journal names the old base's bytes: stale), or the new base with its
empty journal; a record cut at any byte is ignored and overwritten by the next append.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

from google.protobuf.message import DecodeError

from nodeagent.apply import journal
from nodeagent.held import ChangeSet, DeltaError, Held
from nodeagent.safefile import read_regular
from peerplane.runtime.durable import atomic_write
from peerplane.v1 import peerplane_pb2 as pb

__all__ = ["JOURNAL_FILE", "SNAPSHOT_FILE", "StateStore", "atomic_write"]

SNAPSHOT_FILE = "snapshot.binpb"
JOURNAL_FILE = "snapshot.journal"
# The largest snapshot the stream delivers (stream/client.py MAX_RECEIVE_BYTES): a bigger file is no
# snapshot of ours. The journal is bounded by the base's size (below), so by twice that.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
# Records before the next save writes a whole base: a restore replays at most this many
# deltas (one `Held.apply` each, about a millisecond at 8,000 Services).
MAX_RECORDS = 100
MIN_JOURNAL_BYTES = 1024 * 1024  # below this the journal may grow past a quarter of the base
log = logging.getLogger(__name__)


class StateStore:
    """The state dir: remembers what HAProxy runs across agent restarts."""

    def __init__(self, state_dir: str, max_records: int = MAX_RECORDS) -> None:
        self.state_dir = state_dir
        self.max_records = max_records
        # What is on disk, as far as this process wrote or read it: the content hash the
        # base and journal lead to (None: unknown, the next save writes a base), the base
        # file's digest and length, and the journal's end (past its last whole record).
        self._tip: str | None = None
        self._base: tuple[bytes, int] | None = None
        self._end = journal.HEADER_SIZE
        self._records = 0
        try:
            os.makedirs(state_dir, exist_ok=True)
        except OSError as e:  # serve anyway; every save says why it fails
            log.error("state dir %s unusable: %s", state_dir, e)

    @property
    def snapshot_path(self) -> str:
        return os.path.join(self.state_dir, SNAPSHOT_FILE)

    @property
    def journal_path(self) -> str:
        return os.path.join(self.state_dir, JOURNAL_FILE)

    @property
    def journal_records(self) -> int:
        """Records in the journal since its base (tests, and the compaction rule)."""
        return self._records

    def save(self, snapshot: pb.Snapshot) -> None:
        """A whole snapshot as the base (tools and tests)."""
        self._save_base((snapshot.SerializeToString(deterministic=True),))
        self._tip = snapshot.content_hash

    def save_held(
        self, held: Held, before: Held | None = None, change: ChangeSet | None = None
    ) -> None:
        """Save `held`: a record appended to the journal when the store holds `before` and
        `change` leads from it (O(changed) bytes, one fsync); else, or when the journal is
        due for compaction, a new base from the bytes in hand (re-serializing 8 MB per
        change would cost more than applying). OSError when neither can be written; what
        the store held before stays loadable."""
        tip, self._tip = self._tip, None  # unknown until this save is on disk
        if (
            before is not None
            and change is not None
            and tip is not None
            and tip == before.content_hash == change.base
            and self._room()
        ):
            try:
                self._append(journal.framed(journal.delta_payload(before, held, change)))
                self._tip = held.content_hash
                return
            except OSError as e:  # the journal is gone or unwritable: a new base may do
                log.warning(
                    "journal %s not appended (%s); writing a new base", self.journal_path, e
                )
        self._save_base(held.serialized_pieces())
        self._tip = held.content_hash

    def _room(self) -> bool:
        base = self._base[1] if self._base is not None else 0
        size = self._end - journal.HEADER_SIZE
        return self._records < self.max_records and size < max(MIN_JOURNAL_BYTES, base // 4)

    def _append(self, record: bytes) -> None:
        """The record written at the journal's end, over any cut record a crash left, the
        file cut to it, and fdatasync'ed."""
        fd = os.open(self.journal_path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            at, view = self._end, memoryview(record)
            while view:
                written = os.pwrite(fd, view, at)
                view, at = view[written:], at + written
            if os.fstat(fd).st_size > at:
                os.ftruncate(fd, at)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self._end, self._records = at, self._records + 1

    def _save_base(self, pieces: Sequence[bytes]) -> None:
        """The bytes `pieces` join to as the new base (unless the base holds these very
        bytes), written piece by piece, then an empty journal naming it. A crash between
        the two leaves the new base with the old base's journal, which names other bytes
        and is ignored."""
        base = (journal.base_digest(pieces), sum(map(len, pieces)))
        if base != self._base:
            self._base = None
            atomic_write(self.snapshot_path, pieces, 0o600)
            self._base = base
        atomic_write(self.journal_path, journal.header(*base), 0o600)
        self._end, self._records = journal.HEADER_SIZE, 0

    def load(self) -> pb.Snapshot | None:
        """The saved snapshot as a message (tools and tests), or None."""
        held = self.load_held()
        return None if held is None else held.message()

    def load_held(self) -> Held | None:
        """The saved state: the base with every whole record of its journal applied, or
        None when there is no base. A base that cannot be one (a directory, a FIFO,
        unreadable, too large, not a snapshot) counts as none: logged, and the control
        plane sends the snapshot again; it must not stop the agent. A journal that is
        missing, stale or unreadable leaves the base alone; a record cut or refused ends
        the replay there (the state is the last whole one)."""
        self._tip, self._base = None, None
        path = self.snapshot_path
        try:
            data = read_regular(path, MAX_SNAPSHOT_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            log.error("saved snapshot %s unusable, starting without it: %s", path, e.strerror or e)
            return None
        try:
            held = Held.from_snapshot(pb.Snapshot.FromString(data))
        except (DecodeError, DeltaError) as e:  # treat as absent, the control plane resends
            log.error("saved snapshot %s is corrupt, starting without it: %s", path, e)
            return None
        self._base = (journal.base_digest((data,)), len(data))
        replayed = self._replay(held, *self._base)
        if replayed is not None:
            held = replayed
            self._tip = held.content_hash
        return held

    def _replay(self, held: Held, digest: bytes, length: int) -> Held | None:
        """`held` (the base) moved by its journal's whole records; None when the journal
        cannot extend this base (the next save writes a base and a journal anew)."""
        path = self.journal_path
        try:
            data = read_regular(path, 2 * MAX_SNAPSHOT_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            log.error("journal %s unusable, restoring the base alone: %s", path, e.strerror or e)
            return None
        if not journal.extends(data, digest, length):
            log.info("journal %s extends another base; restoring the base alone", path)
            return None
        end, count = journal.HEADER_SIZE, 0
        for record in journal.records(data):
            try:
                # Not hashed again: the CRC says the record is as written, from held parts.
                delta = pb.SnapshotDelta.FromString(record.payload)
                held, _ = held.apply(delta, verify=False)
            except (DecodeError, DeltaError) as e:
                log.error("journal %s: record %d refused (%s); restoring before it", path, count, e)
                break
            end, count = record.end, count + 1
        if end < len(data):
            log.warning(
                "journal %s: %d bytes after its last whole record (a write cut short) ignored",
                path,
                len(data) - end,
            )
        self._end, self._records = end, count
        return held
