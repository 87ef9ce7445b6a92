"""The applier's one pipeline, its activation strategies and its one error type, against a
real HAProxy (each installed version); and the agent's flags -> objects wiring.

docs/design.md, "Architecture" (action -> HAProxy; NACK keeps the old config serving) and
"Master CLI, runtime API, reload failures" (which failures are retried).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent import cli
from nodeagent.apply import checked_render
from nodeagent.apply.activation import External, Managed
from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.cli import wiring
from nodeagent.cli.flags import build_parser
from nodeagent.config import render as render_module
from nodeagent.config.changes import ApplyPath
from nodeagent.config.render import RenderOptions, render
from nodeagent.haproxy.driver import HAProxy
from nodeagent.heap import Heap
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.haproxy_env import (
    backend,
    free_port,
    http_get,
    identity_server,
    loopback_net,
    make_instance,
    snapshot,
)
from tests.helpers.haproxy_versions import HAProxyBinary

HOST = "shop.example.com"


class Site:
    """One pod `pod-a` on a private 127.x net, two backends, and an external-mode applier
    (no supervisor): HAProxy is started by the test, as its own container would be."""

    def __init__(self, tmp: Path, binary: str, net: str, backends: list[tuple[str, int]]):
        self.net, self.ip, self.binary, self.backends = net, f"{net}.1", binary, backends
        self.peer_port, self.http_port = free_port(self.ip), free_port(self.ip)
        self.master, runtime = str(tmp / "master.sock"), str(tmp / "runtime.sock")
        self.config = str(tmp / "haproxy.cfg")
        self.haproxy = HAProxy(self.master, runtime, binary, sync_wait=1.0)
        self.options = RenderOptions("pod-a", bind_address=self.ip, runtime_socket=runtime)
        self.store = StateStore(str(tmp / "state"))
        self.applier = Applier(
            self.options, self.config, self.store, self.haproxy, start_timeout=1.0
        )

    def snap(self, endpoint: int, version: int, peer: str = "pod-a") -> pb.Snapshot:
        b = backend("default_shop_http", [self.backends[endpoint]], balance="roundrobin")
        return snapshot(
            [(peer, self.ip, self.peer_port)],
            [b],
            http_port=self.http_port,
            routes=[(HOST, "default_shop_http")],
            version=version,
        )

    def get(self) -> str:
        return http_get(self.ip, self.http_port, f"{HOST}:{self.http_port}")

    @contextlib.contextmanager
    def external_haproxy(self) -> Iterator[None]:
        """HAProxy started by someone else on the file the agent wrote; stopped by PID."""
        argv = [self.binary, "-W", "-S", self.master, "-f", self.config]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            self.haproxy.wait_running(10)
            yield
        finally:
            proc.terminate()
            proc.wait(10)


@pytest.fixture
def site(tmp_path: Path, haproxy_bin: HAProxyBinary) -> Iterator[Site]:
    net = loopback_net()
    with (
        identity_server(f"{net}.11", "pod-11") as p11,
        identity_server(f"{net}.12", "pod-12") as p12,
    ):
        yield Site(tmp_path, haproxy_bin.path, net, [(f"{net}.11", p11), (f"{net}.12", p12)])


def test_restore_gives_an_external_haproxy_not_up_yet_only_the_file(site: Site) -> None:
    """Restore is the apply pipeline: the saved snapshot is rendered, checked and recorded
    as applied, so the next change is classified against it (runtime API, no reload)."""
    saved = site.snap(0, 7)
    site.store.save(saved)
    assert site.applier.restore()
    assert Path(site.config).read_text() == render(saved, site.options)
    assert site.applier.applied_version == 7
    assert site.applier.applied_hash == saved.content_hash
    with site.external_haproxy():
        assert site.get() == "pod-11"
        moved = site.applier.apply(site.snap(1, 8))
        assert moved.ok, moved.error
        assert moved.kind is ApplyPath.RUNTIME
        assert site.get() == "pod-12"


def test_restore_refuses_a_saved_snapshot_without_this_pod_and_starts_nothing(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """The local-peer check of the pipeline holds for the saved snapshot too."""
    net = loopback_net()
    inst = make_instance(tmp_path, f"{net}.1", "pod-a", binary=haproxy_bin.path)
    other = snapshot([("pod-z", f"{net}.2", 10000)], [backend("ns_a_80", [(f"{net}.11", 80)])])
    inst.applier.store.save(other)
    try:
        assert not inst.applier.restore()
        assert not inst.supervisor.started
        assert not Path(inst.config_path).exists()
        assert inst.applier.applied_version == 0
    finally:
        inst.supervisor.stop()


def test_a_failed_activation_is_a_retryable_nack_and_puts_the_previous_file_back(
    site: Site,
) -> None:
    """External mode, HAProxy never comes up: `reload failed`, retryable (the client
    re-applies with backoff), and the file HAProxy would start on is the previous one."""
    previous = render(site.snap(0, 1), site.options)
    Path(site.config).write_text(previous)
    result = site.applier.apply(site.snap(1, 2))
    assert (result.ok, result.kind, result.retryable) == (False, ApplyPath.RELOAD, True)
    assert result.error.startswith("reload failed: HAProxy not running after 1.0s")
    # What the operator needs, not the errno of a socket that was never made
    assert f"no master answers on {site.applier.haproxy.master_socket}" in result.error
    assert "its log (the haproxy container's" in result.error and "Errno" not in result.error
    assert Path(site.config).read_text() == previous
    assert site.applier.applied_version == 0


def test_render_check_and_peer_failures_are_final_nacks(site: Site, tmp_path: Path) -> None:
    """Only a new snapshot can fix these: not retryable, nothing written."""
    bad_name = site.snap(0, 1)
    bad_name.backends[0].name = "bad name"
    render_error = site.applier.apply(bad_name)
    assert (render_error.ok, render_error.kind, render_error.retryable) == (False, None, False)
    assert render_error.error.startswith("render: ")

    lacking = site.applier.apply(site.snap(0, 2, peer="pod-z"))
    assert (lacking.ok, lacking.retryable) == (False, False)
    assert "lacks this pod (pod-a)" in lacking.error

    failing = tmp_path / "haproxy-check-fails"
    failing.write_text("#!/bin/sh\necho '[ALERT] check refused by test' >&2\nexit 1\n")
    failing.chmod(0o755)
    site.haproxy.haproxy_bin = str(failing)
    refused = site.applier.apply(site.snap(0, 3))
    assert (refused.ok, refused.kind, refused.retryable) == (False, ApplyPath.RELOAD, False)
    assert "check refused by test" in refused.error
    assert not Path(site.config).exists()


def _run_flags(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "run",
        "--control-plane",
        "127.0.0.1:9",
        "--config",
        str(tmp_path / "haproxy.cfg"),
        "--state-dir",
        str(tmp_path / "state"),
        "--insecure",
        *extra,
    ]


def test_wiring_picks_the_activation_by_mode_and_starts_nothing(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    identity = ("--pod-namespace", "ns", "--pod-name", "pod-a", "--haproxy-bin", haproxy_bin.path)
    flags = build_parser()
    managed = wiring.build_agent(
        flags.parse_args(_run_flags(tmp_path, *identity, "--manage-haproxy"))
    )
    assert isinstance(managed.applier.activation, Managed)
    assert managed.supervisor is not None and not managed.supervisor.started
    assert managed.applier.options.haproxy_version == haproxy_bin.version_tuple[:2]
    assert isinstance(managed.client.heap, Heap)  # frozen after applies (nodeagent/heap.py)
    external = wiring.build_agent(flags.parse_args(_run_flags(tmp_path, *identity)))
    assert isinstance(external.applier.activation, External)
    assert (external.supervisor, external.metrics_server) == (None, None)


def test_run_flags_that_cannot_make_an_agent_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert cli.main(_run_flags(tmp_path)) == 2
    long_dir = tmp_path / ("d" * 120)
    flags = _run_flags(tmp_path, "--pod-namespace", "ns", "--pod-name", "pod-a")
    assert cli.main([*flags, "--master-socket", str(long_dir / "master.sock")]) == 2


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--metrics-port", "70000"),
        ("--metrics-port", "-1"),
        ("--metrics-port", "x"),
        ("--check-timeout", "-1"),
        ("--check-timeout", "0"),
        ("--check-timeout", "nan"),
        ("--check-timeout", "inf"),
        ("--sync-wait", "-1"),
        ("--sync-wait", "nan"),
        ("--sync-wait", "1e9"),
    ],
)
def test_run_numeric_flags_out_of_range_are_argparse_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """Incident: `--metrics-port 70000` ended in a traceback, `--check-timeout -1` NACKed
    every reload and `--check-timeout nan` broke the apply loop. Every numeric flag of
    `nodeagent run` is checked when parsed: usage error, exit 2, the flag named."""
    flags = _run_flags(tmp_path, "--pod-namespace", "ns", "--pod-name", "pod-a")
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*flags, f"{flag}={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "Traceback" not in err
    ok = build_parser().parse_args([*flags, "--metrics-port=0", "--check-timeout=0.5"])
    assert (ok.metrics_port, ok.check_timeout, ok.sync_wait) == (0, 0.5, 15.0)


@pytest.mark.parametrize("kind", ["directory", "fifo", "corrupt"])
def test_a_saved_snapshot_that_cannot_be_read_counts_as_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """Incident: an agent whose `snapshot.binpb` was a directory (or unreadable) died at
    start, again at every restart: a crash loop, although the operations guide says a
    corrupt file counts as none. A FIFO would have hung it. Each is now no saved snapshot,
    logged once with the path, and the agent waits for the control plane."""
    store = StateStore(str(tmp_path / "state"))
    target = Path(store.snapshot_path)
    if kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.write_bytes(b"\xff" * 64)
    sockets = (str(tmp_path / "master.sock"), str(tmp_path / "runtime.sock"))
    applier = Applier(
        RenderOptions("pod-a"), str(tmp_path / "haproxy.cfg"), store, HAProxy(*sockets)
    )
    with caplog.at_level(logging.ERROR, logger="nodeagent.apply.saved"):
        assert applier.restore() is False
    assert [r.getMessage() for r in caplog.records if str(target) in r.getMessage()] == [
        caplog.records[0].getMessage()
    ]
    assert "starting without it" in caplog.records[0].getMessage()


def test_faults_around_the_pipeline_are_retryable_nacks_that_heal(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incident: a broken temp directory (for `haproxy -c`) or haproxy.cfg replaced by a
    directory raised out of `apply` instead of a NACK, and the client's apply loop died
    with it. Each is now a retryable NACK naming the fault (an unforeseen exception too),
    and the same snapshot applies once the fault is repaired."""
    snap = site.snap(0, 1)
    with monkeypatch.context() as m:
        m.setattr(tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
        no_tmp = site.applier.apply(snap)
    assert (no_tmp.ok, no_tmp.retryable) == (False, True)
    assert "cannot run haproxy -c" in no_tmp.error and "no-such-tmp" in no_tmp.error

    Path(site.config).mkdir()
    taken = site.applier.apply(snap)
    assert (taken.ok, taken.retryable) == (False, True)
    assert f"cannot read {site.config}" in taken.error
    Path(site.config).rmdir()

    def bug(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("a bug")

    with monkeypatch.context() as m:
        m.setattr(checked_render, "render_held", bug)
        unforeseen = site.applier.apply(snap)
    assert (unforeseen.ok, unforeseen.retryable) == (False, True)
    assert unforeseen.error == "unexpected error: ZeroDivisionError('a bug')"

    Path(site.config).write_text(render(snap, site.options))  # its container starts on it
    with site.external_haproxy():
        healed = site.applier.apply(snap)
        assert healed.ok, healed.error
        assert site.get() == "pod-11"


def test_a_check_that_times_out_is_a_retryable_nack_and_the_same_snapshot_applies_later(
    site: Site, tmp_path: Path
) -> None:
    """Incident (2026-12-05, first start at 8,000 Services beside a loaded host): both
    agents' `haproxy -c` of the 8,000-backend config passed the 15 s `--check-timeout`
    and the timeout was a final NACK, so the fleet stayed on v0 until the next change. A
    check that did not finish says nothing of the config: the client retries it."""
    slow = tmp_path / "haproxy-check-hangs"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    site.haproxy.haproxy_bin, site.haproxy.check_timeout = str(slow), 0.3
    snap = site.snap(0, 1)
    timed_out = site.applier.apply(snap)
    assert (timed_out.ok, timed_out.retryable) == (False, True)
    assert "haproxy -c timed out after 0.3s" in timed_out.error
    assert not Path(site.config).exists()

    site.haproxy.haproxy_bin, site.haproxy.check_timeout = site.binary, 15.0  # a loaded host
    Path(site.config).write_text(render(snap, site.options))  # its container starts on it
    with site.external_haproxy():
        healed = site.applier.apply(snap)
        assert healed.ok, healed.error
        assert site.get() == "pod-11"


def test_a_start_that_outlasts_the_timeout_is_waited_for_by_the_retry_not_reloaded(
    tmp_path: Path, haproxy_bin: HAProxyBinary, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incident (2026-12-05, first start at 8,000 Services on a loaded host): HAProxy took
    over the 15 s start timeout to load the config; the retry of the same snapshot then
    reloaded the master that was still loading ("peers resync unfinished", "no new HAProxy
    worker after 15.0s"), each retry loading the config once more, and no agent ACKed in 7
    minutes. The retry now waits for the master it started and, the file unchanged, takes
    it as the start: no reload, no `haproxy -c` of that file beside its load, and no
    render again (the failed start's render is the retry's cache: 8 s at load 18)."""
    net = loopback_net()
    slow = tmp_path / "haproxy-slow-start"
    calls = tmp_path / "calls"
    slow.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase " $* " in *" -W "*) sleep 1.5;; esac\n'
        f'exec {haproxy_bin.path} "$@"\n'
    )
    slow.chmod(0o755)
    inst = make_instance(tmp_path / "inst", f"{net}.1", "pod-a", binary=str(slow))
    inst.applier.start_timeout = 0.5
    snap = snapshot([("pod-a", f"{net}.1", free_port(f"{net}.1"))], [backend("ns_a_80", [])])
    try:
        first = inst.applier.apply(snap)
        assert (first.ok, first.retryable) == (False, True)
        assert "HAProxy not running after 0.5s" in first.error
        master = inst.supervisor.pid
        assert master is not None, "the master keeps starting"
        inst.applier.start_timeout = 10.0
        rendered: list[str] = []
        backend_text = render_module._backend_text

        def counted(backend: pb.Backend, *args: object) -> str:
            rendered.append(backend.name)
            return backend_text(backend, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(render_module, "_backend_text", counted)
        retried = inst.applier.apply(snap)
        assert rendered == [], "the retry renders again what the failed start rendered"
        assert retried.ok, retried.error
        assert inst.supervisor.pid == master
        info = inst.haproxy.show_proc()
        assert (info.master_pid, info.reloads) == (master, 0)
        assert inst.applier.applied_hash == snap.content_hash
        # nor checked while it loads (issue 33): it loads these very bytes, as a start
        assert (_runs(calls, "-W"), _runs(calls, "-c")) == (1, 0)
    finally:
        inst.supervisor.stop()


def test_a_start_still_loading_past_the_timeout_is_waited_for_not_nacked(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Finding (2026-12-05, first start at 8,000 Services on HAProxy 2.6, load 7 to 14):
    the master loads 336,000 server lines for 20-29 s, all of it CPU or waiting for a
    core; the fixed 15 s start timeout NACKed every such start once, and the retry then
    waited for the same master. A start whose process tree keeps using CPU past the
    timeout is waited for (`activation.LOADING_*`): one apply, an ACK, no NACK."""
    net = loopback_net()
    busy = tmp_path / "haproxy-busy-start"
    burn = "import time\nend = time.process_time() + 2.5\nwhile time.process_time() < end: pass"
    busy.write_text(
        f'#!/bin/sh\ncase " $* " in *" -W "*) {sys.executable} -c "{burn}";; esac\n'
        f'exec {haproxy_bin.path} "$@"\n'
    )
    busy.chmod(0o755)
    inst = make_instance(tmp_path / "inst", f"{net}.1", "pod-a", binary=str(busy))
    inst.applier.start_timeout = 1.0  # a window long enough for some CPU under load
    snap = snapshot([("pod-a", f"{net}.1", free_port(f"{net}.1"))], [backend("ns_a_80", [])])
    try:
        started = inst.applier.apply(snap)
        assert started.ok, started.error
        assert inst.applier.applied_hash == snap.content_hash
        info = inst.haproxy.show_proc()
        assert (info.master_pid, info.reloads) == (inst.supervisor.pid, 0)
    finally:
        inst.supervisor.stop()


def _logging_haproxy(tmp_path: Path, real: str, refuse: bool = False) -> tuple[Path, Path]:
    """A wrapper of HAProxy that writes each command line to a file; `refuse`: every run
    fails as HAProxy does on a config it refuses (an ALERT, exit 1)."""
    calls, wrapper = tmp_path / "calls", tmp_path / "haproxy-logged"
    run = "echo '[ALERT] (1) : refused by test'; exit 1" if refuse else f'exec {real} "$@"'
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{run}\n')
    wrapper.chmod(0o755)
    return wrapper, calls


def _runs(calls: Path, flag: str) -> int:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return sum(1 for line in lines if flag in line.split())


def test_a_first_start_runs_no_haproxy_c_and_a_reload_does(
    tmp_path: Path, haproxy_bin: HAProxyBinary
) -> None:
    """Issue 33: at 8,000 Services `haproxy -c` and HAProxy's start each loaded the 17.8 MB
    config for seconds, one after the other. With nothing running, the start is the check
    (it refuses what `-c` refuses); a reload still checks first: the running HAProxy must
    not be touched by a config it would refuse."""
    net = loopback_net()
    wrapper, calls = _logging_haproxy(tmp_path, haproxy_bin.path)
    inst = make_instance(tmp_path / "inst", f"{net}.1", "pod-a", binary=str(wrapper))
    peers = [("pod-a", f"{net}.1", free_port(f"{net}.1"))]
    try:
        first = inst.applier.apply(snapshot(peers, [backend("ns_a_80", [])]))
        assert first.ok and first.started, first
        assert (_runs(calls, "-W"), _runs(calls, "-c")) == (1, 0)
        second = inst.applier.apply(
            snapshot(peers, [backend("ns_a_80", []), backend("ns_b_80", [])], version=2)
        )
        assert second.ok and second.kind is ApplyPath.RELOAD, second
        assert (_runs(calls, "-W"), _runs(calls, "-c")) == (1, 1)
    finally:
        inst.supervisor.stop()


def test_a_first_start_haproxy_refuses_is_checked_and_nacked_in_its_words(
    tmp_path: Path,
) -> None:
    """The unchecked first start failed: the master is gone and is not restarted on the
    refused file; `haproxy -c` then runs to name what to set aside, and, naming no part,
    NACKs in HAProxy's words as before (final: only a new snapshot can mend it). A master
    that died at once used to be waited for until the start timeout."""
    net = loopback_net()
    wrapper, calls = _logging_haproxy(tmp_path, "", refuse=True)
    inst = make_instance(tmp_path / "inst", f"{net}.1", "pod-a", binary=str(wrapper))
    peers = [("pod-a", f"{net}.1", free_port(f"{net}.1"))]
    try:
        begun = time.monotonic()
        refused = inst.applier.apply(snapshot(peers, [backend("ns_a_80", [])]))
        # its exit is seen at once: no wait for the 15 s start timeout of a master gone
        assert time.monotonic() - begun < inst.applier.start_timeout / 2
        assert (refused.ok, refused.kind, refused.retryable) == (False, ApplyPath.RELOAD, False)
        assert "refused by test" in refused.error, refused.error
        assert (_runs(calls, "-W"), _runs(calls, "-c")) == (1, 1)
        assert not inst.supervisor.started and inst.applier.applied_version == 0
        time.sleep(inst.supervisor.restart_delay + 0.5)
        assert _runs(calls, "-W") == 1, "the refused master was restarted"
    finally:
        inst.supervisor.stop()
