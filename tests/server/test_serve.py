"""`controlplane serve` end to end: a manifest folder in, snapshots out over gRPC."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane.cli.flags import (
    DEFAULT_LISTEN,
    DEFAULT_SETTINGS_CONFIGMAP,
    add_serve_arguments,
)
from controlplane.ledger.sqlite import ledger_document
from controlplane.source.convert import DEFAULT_HAPROXY_SELECTOR
from peerplane.runtime import allocator
from tests.helpers.malloc import MallocSeen, glibc_only, malloc_after
from tests.helpers.server_process import BIN, ROOT, ServeProcess, grpcurl
from tests.helpers.waiting import wait_until
from tests.server.test_observability import samples, scrape

DEMO = ROOT / "deploy" / "examples" / "demo"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"


def published(version: int) -> re.Pattern[str]:
    return re.compile(rf"published {re.escape(WORKLOAD)} v{version} hash ([0-9a-f]+)")


def get_snapshot(address: str) -> dict[str, object]:
    output = grpcurl(
        address, "peerplane.v1.PeerPlane/GetSnapshot", data=json.dumps({"workload": WORKLOAD})
    )
    snapshot: dict[str, object] = json.loads(output)
    return snapshot


def shop_addresses(snapshot: dict[str, object]) -> list[str]:
    backends = snapshot["backends"]
    assert isinstance(backends, list)
    (shop,) = [b for b in backends if b["name"] == "default_shop_http"]
    return [slot.get("address", "") for slot in shop["slots"] if slot.get("enabled")]


def test_serve_a_folder_and_follow_an_edit(tmp_path: Path) -> None:
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    state = tmp_path / "state.json"
    with ServeProcess("--source", f"files:{manifests}", "--state", str(state)) as serve:
        first_hash = serve.wait_for(published(1)).group(1)
        assert json.loads(grpcurl(serve.address, "grpc.health.v1.Health/Check")) == {
            "status": "SERVING"
        }
        snapshot = get_snapshot(serve.address)
        assert snapshot["version"] == "1"
        assert str(snapshot["content_hash"]).startswith(first_hash)
        assert shop_addresses(snapshot) == ["127.0.2.1", "127.0.2.2", "127.0.2.3"]
        assert state.exists()

        shop = manifests / "shop.yaml"
        shop.write_text(shop.read_text().replace('["127.0.2.3"]', '["127.0.2.4"]'))
        serve.wait_for(published(2))
        changed = get_snapshot(serve.address)
        assert changed["version"] == "2"
        # The new endpoint takes the free slot 3; the other two keep theirs.
        assert shop_addresses(changed) == ["127.0.2.1", "127.0.2.2", "127.0.2.4"]

        assert serve.terminate() == 0
        serve.wait_for(re.compile(r"stopped$"))
    saved = ledger_document(state)
    assert "127.0.2.4" in json.dumps(saved)


def imported_modules(stderr_lines: list[str]) -> set[str]:
    """Module names from `PYTHONPROFILEIMPORTTIME=1` output (every import, also late ones)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr_lines
        if line.startswith("import time:") and "|" in line
    }


def kubernetes_modules(modules: set[str]) -> list[str]:
    return sorted(
        m for m in modules if m.split(".")[0] == "kubernetes" or m.startswith("controlplane.kube")
    )


def test_serve_in_files_mode_never_imports_kubernetes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/design.md, Architecture: `controlplane/kube/` is the only Kubernetes edge, and
    files mode needs none of it, through start, a published version and the stop."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    with ServeProcess("--source", f"files:{manifests}", "--state", str(tmp_path / "s")) as serve:
        serve.wait_for(published(1))
        assert serve.terminate() == 0
        serve.wait_for(re.compile(r"stopped$"))
        modules = imported_modules(serve.lines)
    # The profile saw the run: the files source and the reconcile loop were imported.
    assert {"controlplane.source.files", "controlplane.loop.reconcile", "grpc"} <= modules
    assert kubernetes_modules(modules) == []


def test_compute_never_imports_kubernetes(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "controlplane"), "compute", "--source", f"files:{DEMO}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},
    )
    assert done.returncode == 0, done.stderr
    modules = imported_modules(done.stderr.splitlines())
    assert {"controlplane.source.files", "controlplane.compute"} <= modules
    assert kubernetes_modules(modules) == []


def test_serve_refuses_a_missing_folder(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    done = subprocess.run(
        [
            str(BIN / "controlplane"),
            "serve",
            "--source",
            f"files:{missing}",
            "--listen",
            "127.0.0.1:0",
            "--insecure",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert f"{missing} is not a directory" in done.stderr


@glibc_only
def test_serve_sets_malloc_up_for_a_long_life(tmp_path: Path) -> None:
    """docs/operations.md, "Memory over time": `serve` caps glibc's arenas and fixes its
    mmap threshold at start, as the agent does (with glibc's defaults the control plane
    of the hour's soak had 14 arenas, and malloc's free bytes rose 17 MiB an hour). Seen
    from what malloc does after `serve` returned on a missing folder."""
    argv = ["serve", "--source", f"files:{tmp_path / 'nowhere'}", "--listen", "127.0.0.1:0"]
    code = f"from controlplane.cli import main; print(main({[*argv, '--insecure']!r}))"
    assert malloc_after(code) == (["2"], MallocSeen(allocator.ARENA_MAX, threshold_fixed=True))


def test_serve_flags_and_their_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--source", "files:/tmp/x"])
    assert args.listen == DEFAULT_LISTEN
    assert str(args.configmap) == DEFAULT_SETTINGS_CONFIGMAP
    assert args.haproxy_selector == DEFAULT_HAPROXY_SELECTOR
    assert args.state is None
    assert args.log_level == "info"
    for bad in (["--source", "nowhere"], ["--source", "files:/x", "--listen", "18000"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--keepalive-time", "inf"),
        ("--keepalive-time", "nan"),
        ("--keepalive-timeout", "1e300"),
        ("--max-connection-age", "1e300"),
        ("--max-connection-age", "-5"),
        ("--lease-duration", "0"),
        ("--lease-duration", "nan"),
        ("--lease-duration", "inf"),
        ("--token-cache-ttl", "inf"),
        ("--max-send-message-bytes", "9" * 5000),
        ("--max-send-message-bytes", "4294967296"),
        ("--max-receive-message-bytes", "1"),
        ("--max-streams-per-peer", "99999999999"),
        ("--retained-versions", "1e3"),
        ("--retained-versions", "100000000"),
    ],
)
def test_serve_refuses_numeric_flags_out_of_range_at_parse_time(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve --keepalive-time inf`, `--max-connection-age 1e300` and `--lease-duration 0`
    or `nan` were accepted and ended in tracebacks from gRPC or the lease timer: every
    numeric flag of `serve` is finite and in range, refused by argparse naming the flag."""
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["--source", "files:/x", "--insecure", flag, value])
    assert stopped.value.code == 2
    assert f"argument {flag}:" in capsys.readouterr().err


def test_a_stuck_folder_source_turns_health_not_serving(tmp_path: Path) -> None:
    """A folder source frozen in a read (a FIFO swapped in for a manifest) left health
    SERVING for 60 s while no edit was picked up and nothing was logged. The source's
    heartbeat reports a pass running past its bound, and `serve`'s watcher turns gRPC
    health (and so /readyz) NOT_SERVING until the pass ends."""
    import asyncio
    import threading

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from controlplane.cli.lifecycle import watch_source
    from controlplane.model import ObjectRef
    from controlplane.publish.store import SnapshotStore
    from controlplane.server import ControlPlaneServer
    from controlplane.source.files import FilesSource

    shutil.copytree(DEMO, tmp_path / "m")
    release = threading.Event()
    blocking = threading.Event()

    def on_parsed(_: int) -> None:  # stands for a read that blocks
        if blocking.is_set():
            release.wait(30)

    source = FilesSource(
        tmp_path / "m",
        ObjectRef.parse(DEFAULT_SETTINGS_CONFIGMAP),
        on_parsed=on_parsed,
        stall_after_s=0.2,
    )
    source.refresh()
    store = SnapshotStore()
    store.publish({})

    async def body() -> None:
        import grpc

        server = ControlPlaneServer(store)
        port = await server.start("127.0.0.1:0")
        watcher = asyncio.ensure_future(watch_source(source, server, every_s=0.05))
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                health = health_pb2_grpc.HealthStub(channel)
                updates = health.Watch(health_pb2.HealthCheckRequest(service=""))
                statuses = health_pb2.HealthCheckResponse
                assert (await updates.read()).status == statuses.SERVING
                blocking.set()
                (tmp_path / "m" / "shop.yaml").touch()
                stuck = asyncio.get_running_loop().run_in_executor(None, source.refresh)
                assert (await updates.read()).status == statuses.NOT_SERVING
                assert "one pass has been running for" in source.stalled()
                release.set()
                await stuck
                assert (await updates.read()).status == statuses.SERVING
        finally:
            release.set()
            watcher.cancel()
            await server.stop(0)

    asyncio.run(asyncio.wait_for(body(), 30))


def test_a_state_file_that_cannot_be_written_is_said_once_and_not_ready(tmp_path: Path) -> None:
    """An unwritable --state directory printed a full traceback every second and the
    replica did not say it could not publish. Now: one line per cause, retried with
    backoff, NOT_SERVING with the reason in ListWorkloads.replica."""
    manifests = tmp_path / "manifests"
    shutil.copytree(DEMO, manifests)
    state = "/proc/self/peerplane-slots.db"  # absent, and nothing can be made there (root too)
    args = ("--source", f"files:{manifests}", "--state", state, "--metrics-port", "0")
    with ServeProcess(*args) as serve:
        metrics = int(serve.wait_for(re.compile(r"metrics on http://127\.0\.0\.1:(\d+)/")).group(1))
        serve.wait_for(re.compile(r"slot ledger write refused \(retrying will not fix it\)"))
        serve.wait_for(re.compile(r"not ready \(single\): cannot persist the slot ledger"))
        reply = json.loads(
            grpcurl(serve.address, "peerplane.v1.PeerPlane/ListWorkloads", data="{}")
        )
        assert "cannot persist the slot ledger" in reply["replica"]["not_ready_reason"]
        assert reply.get("workloads", []) == [], "nothing published without a persisted ledger"
        assert json.loads(grpcurl(serve.address, "grpc.health.v1.Health/Check")) == {
            "status": "NOT_SERVING"
        }
        # The first write and its retries after 1 s and 2 s more have failed: the retries
        # said nothing more (read once the process has ended, every line it wrote).
        wait_until(
            lambda: ledger_write_failures(metrics) >= 3, 15, "two retries of the ledger write"
        )
        assert serve.terminate() == 0
        serve.read_to_end()
    lines = [line for line in serve.lines if "slot ledger write" in line]
    assert len(lines) == 1, lines
    assert not any("Traceback" in line for line in serve.lines)


def ledger_write_failures(metrics_port: int) -> float:
    """`peerplane_slot_ledger_write_failures_total` over every cause, as scraped."""
    found = samples(scrape(metrics_port)[1])
    return sum(
        v for (name, _), v in found.items() if name == "peerplane_slot_ledger_write_failures_total"
    )
