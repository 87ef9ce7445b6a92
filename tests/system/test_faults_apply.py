"""Apply-path faults on a real HAProxy: disk full, unwritable state or config directory,
unreachable sockets, `haproxy -c` hanging, HAProxy SIGKILLed in the middle of an apply.
Each gives a clear error and a NACK, never a crash, leaves HAProxy serving what it served
(or, killed, restarted on it), and the same snapshot applies once the fault is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nodeagent.apply import validation
from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions
from nodeagent.haproxy import sockrepair
from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.supervisor import Supervisor
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import (
    backend,
    free_port,
    http_get,
    identity_server,
    loopback_net,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.haproxy
HOST = "shop.example.com"


@dataclass
class Rig:
    """One supervised HAProxy whose config and state live where the test says."""

    ip: str
    http_port: int
    peer_port: int
    backends: list[tuple[str, int]]
    applier: Applier
    supervisor: Supervisor
    sockets: Path

    def snap(self, version: int, *, slot: int = 0, balance: str = "source") -> pb.Snapshot:
        b = backend("default_shop_http", [self.backends[slot]], balance=balance)
        return snapshot(
            [("pod-a", self.ip, self.peer_port)],
            [b],
            http_port=self.http_port,
            routes=[(HOST, "default_shop_http")],
            version=version,
        )

    def get(self) -> str:
        return http_get(self.ip, self.http_port, HOST)


@contextlib.contextmanager
def rig(
    tmp: Path,
    config: Path,
    state: Path,
    binary: HAProxyBinary,
    check_bin: str | None = None,
    check_timeout: float = 15,
) -> Iterator[Rig]:
    """`binary` serves; `check_bin` (default: the same) runs `haproxy -c`."""
    net = loopback_net()
    ip = f"{net}.1"
    sockets = tmp / "run"
    sockets.mkdir(parents=True, exist_ok=True)
    master, runtime = str(sockets / "master.sock"), str(sockets / "runtime.sock")
    check = check_bin or binary.path
    hx = HAProxy(master, runtime, check, sync_wait=1.0, check_timeout=check_timeout)
    sup = Supervisor(str(config), master, str(sockets / "haproxy.pid"), binary.path)
    options = RenderOptions("pod-a", bind_address=ip, runtime_socket=runtime)
    applier = Applier(options, str(config), StateStore(str(state)), hx, sup)
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
    ):
        backends = [(f"{net}.11", p11), (f"{net}.12", p12)]
        try:
            yield Rig(ip, free_port(ip), free_port(ip), backends, applier, sup, sockets)
        finally:
            applier.close()
            sup.stop()


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10, check=False)


def fill(directory: Path) -> Path:
    """Write zeros until the filesystem is full; the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    return filler


def test_disk_full_nacks_keeps_serving_and_retries(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    with (
        tmpfs(tmp_path / "disk", "256k") as disk,
        rig(tmp_path, disk / "haproxy.cfg", disk / "state", haproxy_bin) as r,
    ):
        assert r.applier.apply(r.snap(1)).ok
        assert r.get() == "pod-11"
        before = (disk / "haproxy.cfg").read_text()
        filler = fill(disk)
        v2 = r.snap(2, slot=1, balance="roundrobin")  # needs a reload: a new file
        failed = r.applier.apply(v2)
        assert not failed.ok
        assert "cannot write" in failed.error and "No space left" in failed.error
        assert (disk / "haproxy.cfg").read_text() == before
        assert not [p for p in disk.iterdir() if p.name.startswith(".haproxy.cfg.")]
        assert r.get() == "pod-11" and r.applier.applied_version == 1
        filler.unlink()
        retried = r.applier.apply(v2)
        assert retried.ok, retried.error
        assert r.get() == "pod-12" and r.applier.applied_version == 2


def _remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True, timeout=10)


def test_read_only_config_dir_nacks_keeps_serving_and_retries(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """The directory of haproxy.cfg (and its maps and certificates) remounted read-only,
    as a read-only volume would be: NACK `cannot write ...: Read-only file system` for a
    reload (HAProxy untouched). A slot change through the runtime API is ACKed (HAProxy
    runs it and the state dir saved it); its file, written after the ACK, cannot be: the
    failure is counted and the next version NACKs with it until the file is written
    (docs/design.md, "What an ACK promises"); retried with backoff, the snapshot applies
    once the directory is writable again."""
    with (
        tmpfs(tmp_path / "etc", "4m") as etc,
        rig(tmp_path, etc / "haproxy.cfg", tmp_path / "state", haproxy_bin) as r,
    ):
        assert r.applier.apply(r.snap(1)).ok
        before = (etc / "haproxy.cfg").read_text()
        _remount(etc, "ro")
        try:
            failed = r.applier.apply(r.snap(2, slot=1, balance="roundrobin"))
            assert not failed.ok and failed.retryable
            assert failed.error == f"cannot write {etc}/haproxy.cfg: Read-only file system"
            assert (etc / "haproxy.cfg").read_text() == before
            assert r.get() == "pod-11" and r.applier.applied_version == 1
            runtime = r.applier.apply(r.snap(3, slot=1))  # a slot alone: the runtime API
            assert (runtime.ok, runtime.kind) == (True, ApplyPath.RUNTIME), runtime.error
            assert r.applier.applied_version == 3 and r.get() == "pod-12"
            failures = r.applier.metrics.config_write_failures
            wait_until(lambda: failures._value.get() == 1, 10)
            assert (etc / "haproxy.cfg").read_text() == before
            assert r.applier.files.config.failed == (
                f"cannot write {etc}/haproxy.cfg: Read-only file system"
            )
            next_one = r.applier.apply(r.snap(4))  # back to slot 0: still the runtime API
            assert not next_one.ok and next_one.retryable
            assert next_one.error == f"cannot write {etc}/haproxy.cfg: Read-only file system"
            assert r.applier.applied_version == 3
        finally:
            _remount(etc, "rw")
        retried = r.applier.apply(r.snap(2, slot=1, balance="roundrobin"))
        assert retried.ok, retried.error
        assert r.get() == "pod-12" and r.applier.applied_version == 2


def test_unwritable_state_dir_nacks_then_the_resent_snapshot_is_saved(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a regular file where the state dir's parent should be\n")
    with rig(tmp_path, tmp_path / "haproxy.cfg", blocker / "state", haproxy_bin) as r:
        v1 = r.snap(1)
        first = r.applier.apply(v1)
        assert not first.ok
        assert "cannot be saved" in first.error and str(blocker / "state") in first.error
        assert r.get() == "pod-11"  # HAProxy runs it; only persistence is missing
        assert r.applier.applied_hash == ""  # the next Hello asks for it again
        blocker.unlink()
        again = r.applier.apply(v1)  # what the control plane resends after the reconnect
        assert again.ok and again.kind is ApplyPath.NOTHING, again.error
        assert r.applier.applied_hash == v1.content_hash
        assert StateStore(str(blocker / "state")).load() == v1


def test_unreachable_sockets_fall_back_then_nack_then_recover(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    with rig(tmp_path, tmp_path / "haproxy.cfg", tmp_path / "state", haproxy_bin) as r:
        assert r.applier.apply(r.snap(1)).ok
        runtime = r.sockets / "runtime.sock"
        runtime.rename(r.sockets / "runtime.moved")
        v2 = r.snap(2, slot=1)  # only the slot's address: the runtime API path
        fallback = r.applier.apply(v2)
        assert fallback.ok and fallback.kind is ApplyPath.RELOAD, fallback.error
        assert r.get() == "pod-12"
        assert sockrepair.answers(str(runtime))  # that reload bound the socket again
        runtime.rename(r.sockets / "runtime.repaired")

        master = r.sockets / "master.sock"  # now the master CLI is gone too
        master.rename(r.sockets / "master.moved")
        v3 = r.snap(3, slot=0)
        config_v2 = Path(r.applier.config_path).read_text()
        failed = r.applier.apply(v3)
        assert not failed.ok and "reload failed" in failed.error
        assert "No such file" in failed.error or "Connection refused" in failed.error
        assert Path(r.applier.config_path).read_text() == config_v2  # the next start runs v2
        assert r.get() == "pod-12" and r.applier.applied_version == 2

        (r.sockets / "master.moved").rename(master)
        (r.sockets / "runtime.repaired").rename(runtime)
        retried = r.applier.apply(v3)
        assert retried.ok, retried.error
        assert r.get() == "pod-11"


def test_haproxy_check_timeout_nacks_and_kills_the_check(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    hang = tmp_path / "hang"
    fake = tmp_path / "haproxy"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ] && [ -e {hang} ]; then sleep 60 & wait; fi\n'
        f'exec {haproxy_bin.path} "$@"\n'
    )
    fake.chmod(0o755)
    with rig(
        tmp_path, tmp_path / "haproxy.cfg", tmp_path / "state", haproxy_bin, str(fake), 1.0
    ) as r:
        # a first start runs no `haproxy -c` (HAProxy's start is the check): a reload does
        first = r.applier.apply(r.snap(1))
        assert first.ok and first.started, first.error
        running = Path(r.applier.config_path).read_text()
        hang.touch()
        v2 = r.snap(2, balance="roundrobin")
        failed = r.applier.apply(v2)
        assert not failed.ok and failed.error == "haproxy -c timed out after 1s"
        assert failed.retryable  # no verdict on the config: the client retries it
        assert r.applier.applied_version == 1
        assert Path(r.applier.config_path).read_text() == running
        assert r.applier.metrics.validation_failures._value.get() == 1
        stray = subprocess.run(
            ["pgrep", "-f", "^sleep 60$"], capture_output=True, text=True, check=False
        )
        assert stray.stdout.strip() == "" or not _child_of_fake(stray.stdout, fake)
        hang.unlink()
        retried = r.applier.apply(v2)
        assert retried.ok and retried.kind is ApplyPath.RELOAD, retried.error
        assert r.get() == "pod-11"


def _child_of_fake(pids: str, fake: Path) -> bool:
    """Whether any of these sleep processes still belongs to a check of `fake`."""
    for pid in pids.split():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with contextlib.suppress(OSError), open(f"/proc/{ppid}/cmdline", "rb") as f:
            if os.fsencode(str(fake)) in f.read():
                return True
    return False


def _kill_haproxy(r: Rig) -> int:
    """SIGKILL the master and its worker by PID, and wait until the master is gone; the
    master's PID."""
    master = r.supervisor.pid
    assert master is not None
    worker = r.applier.haproxy.show_proc().current_worker
    for pid in (worker, master):
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: r.supervisor.last_exit is not None and r.supervisor.last_exit.pid == master,
        10,
        "the supervisor did not see the master die",
        step=0.02,
    )
    return master


def _until_serving(r: Rig, body: str, seconds: float = 10) -> None:
    """Wait until the restarted HAProxy serves `body` (the supervisor restarts it after 1 s)."""

    def serves() -> bool:
        with contextlib.suppress(OSError):
            return r.get() == body
        return False

    wait_until(serves, seconds, f"HAProxy does not serve {body}", step=0.1)


@pytest.mark.parametrize("where", ["after-check", "in-runtime-update"])
def test_haproxy_killed_in_the_middle_of_an_apply_is_nacked_then_restarted_and_retried(
    tmp_path: Path, haproxy_bin: HAProxyBinary, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """HAProxy (master and worker) SIGKILLed between `haproxy -c` and the reload, or while
    the runtime API sets a slot: the NACK says HAProxy is not running and how it ended;
    the supervisor restarts it on the file on disk (the last applied config, never the
    half-applied one), and the same snapshot applies on the retry."""
    killed: list[int] = []
    with rig(tmp_path, tmp_path / "haproxy.cfg", tmp_path / "state", haproxy_bin) as r:
        assert r.applier.apply(r.snap(1)).ok
        assert r.get() == "pod-11"
        applied_config = Path(r.applier.config_path).read_text()
        if where == "after-check":
            check = validation.validate

            def check_then_kill(*args: object, **kwargs: object) -> str | None:
                said = check(*args, **kwargs)  # type: ignore[arg-type]
                killed.append(_kill_haproxy(r))
                return said

            monkeypatch.setattr(validation, "validate", check_then_kill)
            v2 = r.snap(2, slot=1, balance="roundrobin")  # a new file: the reload path
        else:
            set_servers = r.applier.haproxy.set_servers

            def kill_then_set(updates: object) -> None:
                killed.append(_kill_haproxy(r))
                set_servers(updates)  # type: ignore[arg-type]

            monkeypatch.setattr(r.applier.haproxy, "set_servers", kill_then_set)
            v2 = r.snap(2, slot=1)  # only the slot's address: the runtime API path
        start = time.monotonic()
        failed = r.applier.apply(v2)
        assert time.monotonic() - start < 10
        assert killed and not failed.ok and failed.retryable
        assert failed.error.startswith("reload failed: HAProxy is not running: "), failed.error
        assert f"HAProxy master pid={killed[0]} exited with " in failed.error, failed.error
        assert "-9" in failed.error or "(Killed)" in failed.error, failed.error
        assert r.applier.applied_version == 1
        assert Path(r.applier.config_path).read_text() == applied_config
        monkeypatch.undo()  # the fault is over
        _until_serving(r, "pod-11")  # restarted on the last applied config
        retried = r.applier.apply(v2)  # the agent's retry with backoff
        assert retried.ok, retried.error
        assert r.get() == "pod-12" and r.applier.applied_version == 2
