"""Files mode's slot ledger (`--state FILE`, SQLite): migration from the JSON file of
earlier versions without a move, O(changed) writes, and a SIGKILL in the middle of a write
that loses nothing committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest

from controlplane.ledger.codec import assignment_to_json
from controlplane.ledger.sqlite import SQLITE_MAGIC, FileLedger, LedgerReadError
from controlplane.snapshot import BackendSlots

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
SHOP = BackendSlots(
    8,
    MappingProxyType({("127.0.2.3", 8888): 1, ("127.0.2.1", 8888): 3}),
    MappingProxyType({2: NOW - 10}),
    MappingProxyType({2: ("127.0.2.2", 8888)}),
)


def json_file_as_written_before(path: Path, fmt: int = 2) -> None:
    """What `FileSlotStore.save` of earlier versions wrote: the whole document, indent 1."""
    document = assignment_to_json({"default_shop_http": SHOP})
    if fmt == 1:
        document["format"] = 1
        for backend in document["backends"].values():
            del backend["freed"]
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("fmt", [2, 1])
def test_a_json_state_file_is_migrated_without_a_move(tmp_path: Path, fmt: int) -> None:
    path = tmp_path / "slots.json"
    json_file_as_written_before(path, fmt)
    loaded, _ = FileLedger(path, clock=lambda: NOW).load()
    assert dict(loaded["default_shop_http"].slots) == dict(SHOP.slots)
    FileLedger(path, clock=lambda: NOW).save(loaded)  # a fresh ledger: migrates on save
    ledger = FileLedger(path, clock=lambda: NOW)
    again, problems = ledger.load()
    assert path.read_bytes().startswith(SQLITE_MAGIC)
    assert problems == [] and again == loaded


def test_compute_continues_a_json_state_file(tmp_path: Path) -> None:
    """The demo's shop with slots in an order sorted order would not give: kept."""
    path = tmp_path / "slots.json"
    json_file_as_written_before(path)
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "controlplane"),
            "compute",
            "--source",
            f"files:{ROOT / 'deploy' / 'examples' / 'demo'}",
            "--state",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (snapshot,) = json.loads(done.stdout)
    (shop,) = [b for b in snapshot["backends"] if b["name"] == "default_shop_http"]
    enabled = {s["address"]: s["index"] for s in shop["slots"] if s.get("enabled")}
    assert enabled["127.0.2.3"] == 1 and enabled["127.0.2.1"] == 3
    assert path.read_bytes().startswith(SQLITE_MAGIC)


def test_a_save_writes_only_the_changed_rows(tmp_path: Path) -> None:
    """The JSON file of earlier versions was written whole on every change (2.3 MB per
    change at 2,000 Services); a save now writes the changed backends' rows."""
    path = tmp_path / "slots.db"
    assignment = {f"ns_s{i}_http": SHOP for i in range(200)}
    ledger = FileLedger(path)
    ledger.load()
    ledger.save(assignment)
    ledger.load()  # as after a restart: the database is open
    assert ledger._db is not None
    statements: list[str] = []
    ledger._db.set_trace_callback(statements.append)
    changed = dict(assignment)
    changed["ns_s7_http"] = BackendSlots(16, SHOP.slots)
    del changed["ns_s9_http"]
    ledger.save(changed)
    writes = [s for s in statements if s.startswith(("INSERT", "DELETE"))]
    assert len(writes) == 2, writes
    assert "ns_s7_http" in writes[0] and "ns_s9_http" in writes[1]
    wal = Path(f"{path}-wal")
    assert wal.exists() and wal.stat().st_size < 64 * 1024
    loaded, _ = FileLedger(path).load()
    assert loaded["ns_s7_http"].count == 16 and "ns_s9_http" not in loaded


def _writes(ledger: FileLedger) -> list[str]:
    """The INSERT and DELETE statements the ledger's next saves run (appended to)."""
    assert ledger._db is not None
    statements: list[str] = []
    ledger._db.set_trace_callback(statements.append)
    return statements


def test_a_save_since_the_last_compares_only_the_backends_the_computation_touched(
    tmp_path: Path,
) -> None:
    """At 8,000 Services comparing every backend with the saved one was a Python loop per
    change: a save told what the computation touched since the assignment saved last
    compares those only (here a backend it was not told of differs, and is not written:
    the proof it was not looked at). From any other assignment, every backend."""
    path = tmp_path / "slots.db"
    first = {f"ns_s{i}_http": SHOP for i in range(20)}
    ledger = FileLedger(path)
    ledger.load()
    ledger.save(first)
    loaded, _ = ledger.load()
    statements = _writes(ledger)
    second = {**loaded, "ns_s7_http": BackendSlots(16, SHOP.slots), "ns_s8_http": BackendSlots(9)}
    del second["ns_s9_http"]
    ledger.save(second, since=(loaded, {"ns_s7_http", "ns_s9_http"}))
    writes = [s for s in statements if s.startswith(("INSERT", "DELETE"))]
    assert len(writes) == 2 and "ns_s7_http" in writes[0] and "ns_s9_http" in writes[1]
    statements.clear()
    third = {**second, "ns_s1_http": BackendSlots(12, SHOP.slots)}
    ledger.save(third, since=(dict(second), {"ns_s1_http"}))  # not the saved object
    writes = [s for s in statements if s.startswith(("INSERT", "DELETE"))]
    assert len(writes) == 2 and "ns_s1_http" in writes[0] and "ns_s8_http" in writes[1]


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_state_path_that_is_no_file_is_refused_not_rebuilt(tmp_path: Path, kind: str) -> None:
    """A FIFO as --state hung serve; a directory was read as no state (slots rebuilt)."""
    path = tmp_path / "state"
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    with pytest.raises(LedgerReadError, match="not a regular file"):
        FileLedger(path).load()


WRITER = textwrap.dedent(
    """
    import sys
    from types import MappingProxyType
    from pathlib import Path
    from controlplane.snapshot import BackendSlots
    from controlplane.ledger.sqlite import FileLedger

    ledger = FileLedger(Path(sys.argv[1]))
    assignment, _ = ledger.load()
    assignment = dict(assignment)
    step = int(sys.argv[2])
    while True:
        # Backend b gains endpoint e at slot e+1; no endpoint ever changes slot.
        b, e = step % 50, step // 50
        name = f"ns_s{b}_http"
        old = assignment.get(name)
        slots = dict(old.slots) if old else {}
        slots[(f"10.1.{b}.{e + 1}", 80)] = e + 1
        assignment[name] = BackendSlots(max(42, e + 1), MappingProxyType(slots))
        ledger.save(assignment)
        print(step, flush=True)
        step += 1
    """
)


def test_sigkill_during_writes_moves_no_slot(tmp_path: Path) -> None:
    path = tmp_path / "slots.db"
    step = 0
    for _ in range(6):
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(step)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert writer.stdout is not None
            last = -1
            for _ in range(40 + 17 * step % 23):  # a different moment each time
                last = int(writer.stdout.readline())
            os.kill(writer.pid, signal.SIGKILL)
        finally:
            writer.kill()
            writer.wait(timeout=10)
        loaded, problems = FileLedger(path).load()
        assert problems == []
        for name, slots in loaded.items():
            b = int(name.split("_")[1][1:])
            for (address, _), slot in slots.slots.items():
                assert address == f"10.1.{b}.{slot}", f"{address} moved to slot {slot}"
        committed = sum(len(s.slots) for s in loaded.values())
        assert committed >= last + 1, "a step reported saved was lost"
        step = committed
