"""proto/peerplane/runtime/durable.py `atomic_write`: the new content whole or the old one,
never a torn file, whether the content comes whole or in pieces (the agent's haproxy.cfg
from its sections, docs/findings.md "Agent memory: the config joined for its write")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from peerplane.runtime.durable import PIECES_BUFFER, atomic_write

pytestmark = pytest.mark.unit


def test_pieces_are_written_in_order_as_their_join(tmp_path: Path) -> None:
    """Pieces of every size around the buffer's: the file is their join, byte for byte."""
    pieces = [b"global\n", b"", b"x" * (PIECES_BUFFER + 3), b"\n", b"y" * 5000] * 3
    path = tmp_path / "haproxy.cfg"
    path.write_bytes(b"old")
    atomic_write(path, pieces)
    assert path.read_bytes() == b"".join(pieces)
    atomic_write(path, b"whole")
    assert path.read_bytes() == b"whole"


def test_pieces_that_fail_midway_leave_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    """More than a buffer written before the failure: the old file stays, whole."""
    path = tmp_path / "haproxy.cfg"
    path.write_bytes(b"old content\n")

    def failing() -> Iterator[bytes]:
        yield b"z" * (2 * PIECES_BUFFER)
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        atomic_write(path, failing())
    assert path.read_bytes() == b"old content\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["haproxy.cfg"]
