"""nodeagent/apply/files.py `ConfigFile`: haproxy.cfg written after the ACK by a thread of
its own, the latest content only, and at once before anything reads it (docs/design.md,
"What an ACK promises")."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from nodeagent.apply.files import ConfigFile
from nodeagent.apply.outcome import ApplyError
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.unit


def test_a_deferred_content_is_written_by_the_writer_thread(tmp_path: Path) -> None:
    path = tmp_path / "haproxy.cfg"
    config = ConfigFile(str(path))
    config.defer(lambda: b"v1\n")
    wait_until(lambda: path.exists() and not config.pending, 5)
    assert path.read_bytes() == b"v1\n"
    config.close()


def test_the_latest_content_wins_and_an_older_one_never_lands_over_it(tmp_path: Path) -> None:
    """A slow join of version 1 on the writer thread, version 2 deferred meanwhile, then a
    reload's write of version 3: the file ends with 3, and 2 is never written over it."""
    path = tmp_path / "haproxy.cfg"
    config = ConfigFile(str(path))
    joining, release = threading.Event(), threading.Event()

    def slow() -> bytes:
        joining.set()
        release.wait(5)
        return b"v1\n"

    config.defer(slow)
    assert joining.wait(5)
    config.defer(lambda: b"v2\n")  # never waits for the write in progress
    writer = threading.Thread(target=config.write, args=(b"v3\n",))
    writer.start()  # waits for the write in progress, then drops v2
    release.set()
    writer.join(5)
    config.close()
    assert path.read_bytes() == b"v3\n"
    assert not config.pending


def test_a_failed_deferred_write_is_counted_kept_and_written_by_the_next_flush(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "etc"
    blocker.write_text("a file where the config's directory should be\n")
    failures: list[int] = []
    config = ConfigFile(str(blocker / "haproxy.cfg"), lambda: failures.append(1))
    config.defer(lambda: b"v1\n")
    wait_until(lambda: failures == [1], 5)
    assert config.pending and config.failed is not None
    assert config.failed.startswith(f"cannot write {blocker}/haproxy.cfg")
    with pytest.raises(ApplyError) as raised:
        config.flush()
    assert raised.value.retryable
    blocker.unlink()
    config.flush()
    assert (blocker / "haproxy.cfg").read_bytes() == b"v1\n"
    assert config.failed is None and not config.pending
    config.close()


def test_close_writes_what_is_deferred_and_later_contents_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "haproxy.cfg"
    config = ConfigFile(str(path))
    monkeypatch.setattr(config, "_run", lambda: None)  # a writer thread that writes nothing
    config.defer(lambda: b"v1\n")
    assert config.pending and not path.exists()
    config.close()
    assert path.read_bytes() == b"v1\n"
    config.defer(lambda: b"v2\n")  # an apply that ends after the stop began
    assert path.read_bytes() == b"v2\n"
