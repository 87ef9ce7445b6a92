"""Descriptors sized, not guessed; HAProxy's words when it refuses them (docs/design.md,
"Open files").

Found by a user: at 2,000 Services x 20 endpoints with checks on and 42 slots, HAProxy 2.6
would not start under an open-files limit of 20,000 (`Cannot raise FD limit to 92239,
limit is 20000`: every slot carries `check`), and the NACK said only `HAProxy not running
after 15.0s: [Errno 2] No such file or directory`. Now the agent counts what a config
needs before it touches HAProxy and NACKs with the figures and the remedies; a refusal it
did not foresee is NACKed in HAProxy's words. The low limits are set on the test's HAProxy
processes only (`resource.setrlimit` in the child, or a wrapper that does it), never on
the test process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.config import descriptors, listeners
from nodeagent.config.render import RenderOptions, render, render_held
from nodeagent.haproxy import openfiles, version
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.agent.test_checks import with_check
from tests.agent.test_client import FakePlane, running, serve, within
from tests.agent.test_reload_failure import low_fd_haproxy
from tests.helpers.agent_harness import AgentHarness
from tests.helpers.haproxy_env import backend, free_port, http_get, identity_server, snapshot
from tests.helpers.haproxy_versions import HAProxyBinary

HOST = "shop.example.com"
_ASKED = re.compile(r"Cannot raise FD limit to (\d+), limit is (\d+)")


# Sets the open-files limit, then execs the command: a wrapper process, not `preexec_fn`,
# which forks the test process with its gRPC threads (gRPC's fork handlers then break the
# child at random: an `epoll_wait` error instead of HAProxy's output).
_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2]))); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)


def limited(argv: list[str], soft: int, hard: int) -> list[str]:
    """`argv` run under the open-files limit (soft, hard), that process only."""
    return [sys.executable, "-c", _LIMITED, str(soft), str(hard), *argv]


def asked(binary: str, cfg: str, tmp: Path, limit: int = 1000) -> tuple[int, int, str]:
    """Start HAProxy as the supervisor does (master-worker) on `cfg` under `limit` open
    files: (the N it asked for, the limit it saw, its output). It exits at once."""
    path = tmp / "haproxy.cfg"
    path.write_text(cfg)
    argv = [binary, "-W", "-S", str(tmp / "master.sock"), "-f", str(path)]
    argv += ["-p", str(tmp / "haproxy.pid")]

    done = subprocess.run(
        limited(argv, limit, limit), capture_output=True, text=True, timeout=60, check=False
    )
    out = done.stdout + done.stderr
    found = _ASKED.search(out)
    assert found is not None, out
    return int(found.group(1)), int(found.group(2)), out


def _configs(net: str) -> dict[str, pb.Snapshot]:
    def checked(name: str, count: int) -> pb.Backend:
        return with_check(backend(name, [(f"{net}.11", 8080)], count=count), 2000, 2, 3)

    peers = [("pod-a", f"{net}.1", 10000), ("pod-b", f"{net}.2", 10000)]
    return {
        "checks on": snapshot(
            peers[:1], [checked(f"default_s{i}_http", 42) for i in range(20)], http_port=8080
        ),
        "checks off": snapshot(
            peers[:1],
            [backend(f"default_s{i}_http", [(f"{net}.11", 8080)], count=42) for i in range(20)],
            http_port=8080,
        ),
        "two peers, tcp frontends": snapshot(
            peers,
            [checked("default_a_http", 10), checked("default_b_5432", 7)],
            http_port=8080,
            tcp=[(5432, "default_b_5432"), (5433, "default_b_5432")],
        ),
        "no peers, no frontend": snapshot([], [checked("default_a_http", 3)]),
        "route listeners": with_listeners(
            snapshot(peers[:1], [checked("default_a_http", 5)], http_port=8080),
            {8080: "c.example.com", 8081: "b.example.com"},
        ),
    }


def with_listeners(snap: pb.Snapshot, hosts: dict[int, str]) -> pb.Snapshot:
    """One HTTPRoute rule per listener port (8080 shares the annotations' frontend)."""
    for port, host in hosts.items():
        rule = snap.http_listeners.add(port=port).rules.add(
            source=f"HTTPRoute default/a rule 0 port {port}", hostnames=[host]
        )
        rule.backends.add(backend=snap.backends[0].name, weight=1)
    return snap


CASES = ["checks on", "checks off", "two peers, tcp frontends", "no peers, no frontend"]


@pytest.mark.parametrize("case", [*CASES, "route listeners"])
def test_estimate_is_what_haproxy_asks_for(
    case: str, haproxy_bin: HAProxyBinary, tmp_path: Path
) -> None:
    """The agent's count equals the N of HAProxy's own `Cannot raise FD limit to N`."""
    net = "127.0.0"
    snap = _configs(net)[case]
    served = version.probe(haproxy_bin.path)
    opts = RenderOptions(
        "pod-a",
        bind_address="127.0.0.1",
        runtime_socket=str(tmp_path / "rt.sock"),
        haproxy_version=served,
        maps_dir=str(tmp_path / "maps"),
    )
    rendered = render_held(Held.from_snapshot(snap), opts)
    (tmp_path / "maps").mkdir()
    for path, entries in rendered.maps.items():  # HAProxy opens them before it counts
        Path(path).write_bytes(listeners.map_file(entries))
    cfg = rendered.text()
    threads = openfiles.default_threads(haproxy_bin.path)
    need = descriptors.needs(cfg.encode(), threads, served, reload=False)
    n, _, out = asked(haproxy_bin.path, cfg, tmp_path)
    assert need.total == n, (need, out)


def shop(net: str, ip: str, bport: int, http_port: int, slots: int, ver: int) -> pb.Snapshot:
    """The shop behind `http_port`, checked, with `slots` slots (one descriptor each)."""
    checked = with_check(
        backend("default_shop_http", [(f"{net}.11", bport)], count=slots), 2000, 2, 3
    )
    return snapshot(
        [("pod-a", ip, free_port(ip))],
        [checked],
        http_port=http_port,
        routes=[(HOST, "default_shop_http")],
        version=ver,
    )


def budget_between(
    small: pb.Snapshot, large: pb.Snapshot, opts: RenderOptions, threads: int
) -> tuple[int, int]:
    """What the two configs need: a limit between them lets the first run, not the second."""
    low = descriptors.needs(render(small, opts).encode(), threads, opts.haproxy_version).total
    high = descriptors.needs(render(large, opts).encode(), threads, opts.haproxy_version).total
    assert low < high
    return low, high


@pytest.mark.haproxy
def test_a_config_beyond_the_limit_is_nacked_with_figures_before_haproxy_is_touched(
    agents: AgentHarness, haproxy_bin: HAProxyBinary
) -> None:
    """The pre-check: the NACK names what the config needs, the limit and the three
    remedies; HAProxy keeps serving the running config from the same worker, the file on
    disk is the running config's, and the metric says why."""
    inst = agents.instance()
    opts = inst.applier.options
    opts = RenderOptions(
        opts.pod_name,
        opts.bind_address,
        opts.runtime_socket,
        haproxy_version=version.probe(haproxy_bin.path),
    )
    inst.applier.options = opts
    threads = openfiles.default_threads(haproxy_bin.path)
    with identity_server(f"{agents.net}.11", "pod-11") as bport:
        http_port = free_port(inst.ip)
        v1 = shop(agents.net, inst.ip, bport, http_port, 42, 1)
        v2 = shop(agents.net, inst.ip, bport, http_port, 420, 2)
        low, high = budget_between(v1, v2, opts, threads)
        inst.applier.budget = descriptors.Budget(low + 10, threads, opts.haproxy_version)
        assert inst.applier.apply(v1).ok
        serving = inst.haproxy.show_proc().current_worker
        running_cfg = Path(inst.config_path).read_bytes()

        refused = inst.applier.apply(v2)
        assert (refused.ok, refused.retryable) == (False, False)
        assert refused.error.startswith(
            f"HAProxy would need {high:,} open files for this config but the limit is "
            f"{low + 10:,}: 2 per connection of maxconn 4,096 = 8,192, + 420 servers with "
            f"health checks, + 3 listeners, + 3 per peer = 3, + 3 per thread = {3 * threads}, "
        ), refused.error
        for remedy in ("Lower `server-slots`", "raise the open-files limit", "health checks off"):
            assert remedy in refused.error
        assert inst.applier.applied_version == 1
        assert inst.haproxy.show_proc().current_worker == serving
        assert Path(inst.config_path).read_bytes() == running_cfg
        assert http_get(inst.ip, http_port, HOST) == "pod-11"
        m = inst.applier.metrics
        assert m.refusals.labels("descriptors")._value.get() == 1
        assert m.descriptors_needed._value.get() == high
        print(f"NACK: {refused.error}")


@pytest.mark.haproxy
def test_haproxy_refusing_a_reload_for_descriptors_is_nacked_in_its_words(
    tmp_path: Path,
    agents: AgentHarness,
    haproxy_bin: HAProxyBinary,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fall-through: the agent counts against its own limit (20,000 here, say) while
    HAProxy got less (a lower limit on its container), so HAProxy itself refuses the
    reload. The NACK sent, the agent's log line and its metric carry HAProxy's ALERT, not
    an errno; the running config keeps serving."""
    limit = 8300  # above a small config's need at maxconn 4096, below a large one's
    inst = agents.instance(binary=low_fd_haproxy(tmp_path, haproxy_bin.path, limit))
    opts, served = inst.applier.options, version.probe(haproxy_bin.path)
    threads = openfiles.default_threads(haproxy_bin.path)
    inst.applier.budget = descriptors.Budget(limit * 10, threads, served)
    client = agents.client(inst.applier, backoff_max=5.0, retry_initial=5.0)

    async def scenario() -> None:
        with identity_server(f"{agents.net}.11", "pod-11") as bport:
            http_port = free_port(inst.ip)
            v1 = shop(agents.net, inst.ip, bport, http_port, 4, 1)
            v2 = shop(agents.net, inst.ip, bport, http_port, 420, 2)
            # HAProxy's N for a reload is the agent's count for one
            expected = descriptors.needs(render(v2, opts).encode(), threads, served).total
            plane = FakePlane([v1, v2])
            async with serve(plane, agents.port), running(client):
                assert (await within(plane.answers.get(), 30)).WhichOneof("message") == "ack"
                nack = (await within(plane.answers.get(), 30)).nack
                assert nack.version == 2
                assert nack.error.startswith("reload failed: HAProxy says: "), nack.error
                assert f"Cannot raise FD limit to {expected}, limit is {limit}." in nack.error
                assert "Errno" not in nack.error and "\n" not in nack.error
                assert await asyncio.to_thread(http_get, inst.ip, http_port, HOST) == "pod-11"
                print(f"NACK: {nack.error}")

    with caplog.at_level(logging.WARNING, logger="nodeagent"):
        asyncio.run(within(scenario(), 90))
    logged = [r.getMessage() for r in caplog.records if "NACK" in r.getMessage()]
    assert any("Cannot raise FD limit to" in line for line in logged), logged
    m = inst.applier.metrics
    assert m.refusals.labels("reload")._value.get() >= 1
    (sample,) = m.last_refusal.collect()[0].samples
    assert sample.labels["stage"] == "reload"
    assert "Cannot raise FD limit to" in sample.labels["reason"]


@pytest.mark.unit  # pure
def test_thread_count_is_read_from_haproxy_vv() -> None:
    text = "Built with multi-threading support (MAX_TGROUPS=16, MAX_THREADS=256, default=12).\n"
    assert openfiles.parse_threads(text) == 12
    assert (
        openfiles.parse_threads("Built with multi-threading support (MAX_THREADS=64, default=2).")
        == 2
    )
    assert openfiles.parse_threads("Built without multi-threading support") is None


@pytest.mark.unit  # pure
def test_no_limit_or_a_fitting_one_refuses_nothing() -> None:
    need = descriptors.Needs(maxconn=4096, checks=84000, listeners=3, peers=2, threads=2, own=32)
    assert need.total == 92239  # the user's 2,000 Services x 42 slots on 2.6, two pods
    assert descriptors.shortfall(need, None) is None
    assert descriptors.shortfall(need, 92239) is None
    text = descriptors.shortfall(need, 20000)
    assert text is not None and text.startswith("HAProxy would need 92,239 open files")


def test_the_agent_raises_its_soft_limit_to_the_hard_one(tmp_path: Path) -> None:
    """In a child started with soft 256 / hard 4096 (the test process keeps its own)."""

    code = (
        "import resource; from nodeagent.haproxy import openfiles; "
        "print(openfiles.raise_soft_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    done = subprocess.run(
        limited([sys.executable, "-c", code], 256, 4096),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split("\n")[0] == "4096 (4096, 4096)", done.stderr
