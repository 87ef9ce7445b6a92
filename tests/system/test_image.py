"""The image: deploy/Dockerfile built as CI can (deploy/build-image: mmdebstrap, podman import,
buildah bud, no Docker engine, no registry) and run with `buildah run --isolation chroot`
as its non-root user: `controlplane compute` on the demo folder, `nodeagent render` of the
result, `haproxy -c` on that config, and `controlplane serve` with a `nodeagent run
--manage-haproxy` that applies the snapshot and ACKs.

The HAProxy here is the image's own (Debian's of the release), not one of the host's
versions, so these tests take no `haproxy_bin`: they run once per Debian release. The
chroot shares the host's network: everything binds to 127.76.x.y, apart from the other
tests. Building needs root and mmdebstrap, podman and buildah (.ci/run installs them).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fleet import DEMO, WORKLOAD, free_port

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "deploy" / "build-image"
OCTET = 76
POD = "haproxy-7x2kq"
# release -> the HAProxy series its Dockerfile build checks for
RELEASES = {"trixie": "3.0", "bookworm": "2.6"}
TOOLS = ("mmdebstrap", "podman", "buildah")

pytestmark = [
    pytest.mark.haproxy,
    pytest.mark.skipif(os.geteuid() != 0, reason="building the image needs root"),
    pytest.mark.skipif(
        any(shutil.which(tool) is None for tool in TOOLS),
        reason="needs mmdebstrap, podman and buildah (apt-get install -y mmdebstrap podman "
        "buildah)",
    ),
]


def run(
    argv: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run in its own process group; on a timeout the whole group is ended, by its id."""
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    ) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(f"{argv[:3]} timed out after {timeout}s:\n{out[-4000:]}") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, "")


class Container:
    """A working container of the image; the work folder is a host directory mounted at
    /work, so what the commands write is read here.

    `buildah run` limits open files to 1,024 unless containers.conf says otherwise; a
    Kubernetes container gets the runtime's default (typically 1,048,576), and the agent
    refuses a config HAProxy could not open files for (the demo's needs about 8,300). The
    container's own containers.conf (CONTAINERS_CONF, this process only) sets this
    process's hard limit (no higher: the sandbox may forbid raising it)."""

    def __init__(self, image: str, folder: Path) -> None:
        self.name = f"peerplane-test-{uuid.uuid4().hex[:12]}"
        self.work = folder / "work"
        self.work.mkdir()
        self.work.chmod(0o777)  # the image's user (65532) writes there
        conf = folder / "containers.conf"
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        conf.write_text(f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}"]\n')
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        done = run(["buildah", "from", "--pull=never", "--name", self.name, image], 120)
        assert done.returncode == 0, done.stdout

    def sh(self, script: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = ["buildah", "run", "--isolation", "chroot", "--volume", f"{self.work}:/work"]
        return run([*argv, self.name, "--", "sh", "-c", script], timeout, self.env)

    def remove(self) -> None:
        run(["buildah", "rm", self.name], 60)


@pytest.fixture(scope="module", params=list(RELEASES))
def image(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The image of one Debian release, built once per test run (the base rootfs tarball
    is cached per day; buildah's layers are reused while their inputs are unchanged)."""
    release = str(request.param)
    tag = f"localhost/peerplane-test:{release}"
    done = run([str(BUILD), "--release", release, "--tag", tag], 1200)
    assert done.returncode == 0, done.stdout[-6000:]
    assert re.search(rf"built {re.escape(tag)} \({release}\) in \d+s; size \d+ MB", done.stdout)
    return release, tag


@pytest.fixture
def container(image: tuple[str, str], tmp_path: Path) -> Iterator[Container]:
    box = Container(image[1], tmp_path)
    try:
        yield box
    finally:
        box.remove()


def demo_manifests(directory: Path) -> None:
    """The demo folder with its loopback addresses moved to 127.76.x.y."""
    shutil.copytree(DEMO, directory)
    for path in directory.glob("*.yaml"):
        path.write_text(re.sub(r"\b127\.0\.(\d+\.\d+)", rf"127.{OCTET}.\1", path.read_text()))
    os.chmod(directory, 0o755)


def test_image_runs_as_its_user_with_the_release_haproxy(
    image: tuple[str, str], container: Container
) -> None:
    release, _ = image
    done = container.sh("id -u; haproxy -v; python3 --version; controlplane --help")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    assert lines[0] == "65532"  # the Dockerfile's non-root user
    assert f"HAProxy version {RELEASES[release]}." in done.stdout
    assert "usage: controlplane" in done.stdout


def test_compute_render_and_haproxy_check_the_demo(container: Container) -> None:
    demo_manifests(container.work / "demo")
    compute = container.sh(
        f"controlplane compute --source files:/work/demo --workload {WORKLOAD}"
        " > /work/snapshot.json"
    )
    assert compute.returncode == 0, compute.stdout
    snapshot = (container.work / "snapshot.json").read_text()
    assert f'"workload": "{WORKLOAD}"' in snapshot
    assert f'"address": "127.{OCTET}.1.1"' in snapshot
    render = container.sh(
        f"nodeagent render --snapshot /work/snapshot.json --pod-name {POD}"
        f" --bind-address 127.{OCTET}.1.1 --runtime-socket /work/runtime.sock"
        " --haproxy-bin /usr/sbin/haproxy --maps-dir /work/maps > /work/haproxy.cfg"
    )
    assert render.returncode == 0, render.stdout
    config = (container.work / "haproxy.cfg").read_text()
    assert f"localpeer {POD}" in config and "peers localinstance" in config
    check = container.sh("haproxy -c -f /work/haproxy.cfg")
    assert check.returncode == 0, check.stdout  # 3.0 says nothing when the file is valid
    # ... and it does check: the same file with one unknown keyword is refused.
    (container.work / "broken.cfg").write_text(config + "\nbackend b\n  no-such-keyword\n")
    broken = container.sh("haproxy -c -f /work/broken.cfg")
    assert broken.returncode != 0 and "no-such-keyword" in broken.stdout, broken.stdout


def test_serve_and_a_managing_agent_apply_and_ack(container: Container) -> None:
    """Both processes in one `buildah run`: the script starts them, waits for the control
    plane's log line of the ACK, and stops both by their PIDs (SIGTERM: the agent stops
    its HAProxy)."""
    demo_manifests(container.work / "demo")
    grpc = free_port(f"127.{OCTET}.0.1")
    address = f"127.{OCTET}.0.1:{grpc}"
    acked = f"agent haproxy-system/{POD} acked"
    agent = (
        f"nodeagent run --control-plane {address} --insecure --pod-namespace haproxy-system"
        f" --pod-name {POD} --config /work/agent/haproxy.cfg --state-dir /work/agent/state"
        f" --bind-address 127.{OCTET}.1.1 --manage-haproxy --haproxy-bin /usr/sbin/haproxy"
        " --log-format json"
    )
    script = f"""
mkdir -p /work/agent
controlplane serve --source files:/work/demo --listen {address} --insecure \
    > /work/serve.log 2>&1 &
serve=$!
{agent} > /work/agent.log 2>&1 &
agent=$!
i=0
while [ $i -lt 600 ] && ! grep -q "{acked}" /work/serve.log; do sleep 0.1; i=$((i + 1)); done
kill -TERM $agent; wait $agent; echo "agent exit $?"
kill -TERM $serve; wait $serve; echo "serve exit $?"
"""
    done = container.sh(script, timeout=120)
    serve_log = (container.work / "serve.log").read_text()
    agent_log = (container.work / "agent.log").read_text()
    report = f"{done.stdout}\n--- serve\n{serve_log[-3000:]}\n--- agent\n{agent_log[-3000:]}"
    assert done.returncode == 0, report
    assert acked in serve_log, report
    assert "agent exit 0" in done.stdout and "serve exit 0" in done.stdout, report
    assert '"event": "ack"' in agent_log and '"path": "reload"' in agent_log, report
    config = (container.work / "agent" / "haproxy.cfg").read_text()
    assert f"localpeer {POD}" in config
    # Nothing left behind: the agent's HAProxy stopped with it.
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert "/work/agent/haproxy.cfg" not in ps.stdout
