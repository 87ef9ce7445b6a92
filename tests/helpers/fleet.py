"""A whole fleet on loopback: control plane, agents with their own HAProxy, backends.

Used by the end-to-end tests and by `make demo`. Every simulated pod has its own
127.x address; the cluster is the demo's manifests with the second octet of every
address replaced, so a test fleet never collides with a running demo. Every process is
started here and stopped here, by PID.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import http.server
import os
import re
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc
from tests.helpers.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "deploy" / "examples" / "demo"
NAMESPACE = "haproxy-system"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
HAPROXY_PODS = (("haproxy-7x2kq", "127.0.1.1"), ("haproxy-m4r9t", "127.0.1.2"))
HTTP_PORT = 18080
READYZ_PORT = 19101  # each agent's /readyz on its own pod address (the DaemonSet's 9101)
TCP_PORT = 15432
# (pod name, address, port, kind) of every backend pod in the demo manifests.
BACKENDS = (
    ("shop-0", "127.0.2.1", 8888, "http"),
    ("shop-1", "127.0.2.2", 8888, "http"),
    ("shop-2", "127.0.2.3", 8888, "http"),
    ("catalog-0", "127.0.3.1", 8888, "http"),
    ("catalog-1", "127.0.3.2", 8888, "http"),
    ("db-0", "127.0.4.1", 15433, "tcp"),
    ("db-1", "127.0.4.2", 15433, "tcp"),
)


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or (
        "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- backends


class _Identity(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the name of the backend pod it plays."""

    server_version = "backend"

    def do_GET(self) -> None:
        body = f"{self.server.pod_name}\n".encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class HttpBackend(http.server.ThreadingHTTPServer):
    """An HTTP server answering every GET with `pod_name`."""

    daemon_threads = True
    request_queue_size = 128  # the default 5 drops SYNs when many clients connect at once

    def __init__(self, pod_name: str, address: tuple[str, int]) -> None:
        self.pod_name = pod_name
        super().__init__(address, _Identity)


class _TcpIdentity(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(f"{self.server.pod_name}\n".encode())  # type: ignore[attr-defined]


class _TcpBackend(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, pod_name: str, address: tuple[str, int]) -> None:
        self.pod_name = pod_name
        super().__init__(address, _TcpIdentity)


@dataclass
class Backends:
    """Tiny servers that answer with their pod name, one per (address, port)."""

    servers: dict[str, socketserver.BaseServer] = field(default_factory=dict)
    # How long `stop` may wait for a server's loop to notice. socketserver's default, 0.5 s,
    # made the persistence benchmark spend most of its time stopping removed pods, and every
    # fleet's teardown 2.7 s (seven backends, one after the other; docs/findings.md).
    poll_interval: float = 0.05

    def start(self, name: str, address: str, port: int, kind: str = "http") -> None:
        server: socketserver.BaseServer
        if kind == "http":
            server = HttpBackend(name, (address, port))
        else:
            server = _TcpBackend(name, (address, port))
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": self.poll_interval},
            name=f"backend-{name}",
            daemon=True,
        ).start()
        self.servers[name] = server

    def stop(self, name: str) -> None:
        server = self.servers.pop(name)
        server.shutdown()
        server.server_close()

    def stop_all(self) -> None:
        """Stop every server; their loops are told at once, so the wait is one poll
        interval, not one per server."""
        with concurrent.futures.ThreadPoolExecutor() as pool:
            list(pool.map(self.stop, list(self.servers)))  # list(): failures raised here


# ---------------------------------------------------------------- clients


def http_get(
    haproxy: str, host: str, source: str | None = None, port: int = HTTP_PORT, timeout: float = 5
) -> str:
    """GET / through HAProxy at `haproxy` on a fresh connection, from source address
    `source` (any when None); the body."""
    bind = (source, 0) if source is not None else None
    conn = http.client.HTTPConnection(haproxy, port, timeout=timeout, source_address=bind)
    try:
        conn.request("GET", "/", headers={"Host": host, "Connection": "close"})
        response = conn.getresponse()
        body = response.read().decode().strip()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status} from {haproxy} for {host}: {body[:200]}")
        return body
    finally:
        conn.close()


def tcp_get(haproxy: str, source: str, port: int = TCP_PORT, timeout: float = 5) -> str:
    with socket.create_connection(
        (haproxy, port), timeout=timeout, source_address=(source, 0)
    ) as s:
        return s.recv(256).decode().strip()


def unix_command(path: Path, command: str, timeout: float = 5) -> str:
    """One command on an HAProxy runtime socket; the whole reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def table_entries(text: str) -> dict[str, str]:
    """`show table` output -> {client key: server_key (name)}."""
    entries = {}
    for line in text.splitlines():
        key = re.search(r"\bkey=(\S+)", line)
        server = re.search(r"\bserver_key=(\S+)", line) or re.search(r"\bserver_id=(\S+)", line)
        if key and server:
            entries[key.group(1)] = server.group(1)
    return entries


# ---------------------------------------------------------------- processes


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGTERM the process we started (by its PID), SIGKILL it if it outlives `timeout`."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def stop_orphaned_haproxy(directory: Path) -> None:
    """SIGKILL the HAProxy master whose pidfile is in `directory`/state, if it outlived its
    agent (an agent killed by a fault test leaves it serving, on purpose). By PID, and
    only when that PID's command line still names this directory (never a recycled PID)."""
    try:
        pid = int((directory / "state" / "haproxy.pid").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return
    if str(directory).encode() not in cmdline:
        return
    workers = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                workers.append(int(stat.parent.name))
    for victim in (pid, *workers):
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


@dataclass
class AgentHandle:
    pod_name: str
    address: str
    directory: Path
    process: subprocess.Popen[bytes]
    readiness_port: int | None = None  # its /readyz, when the fleet serves readiness

    @property
    def readyz_url(self) -> str:
        assert self.readiness_port is not None, "a fleet without readiness=True"
        return f"http://{self.address}:{self.readiness_port}/readyz"

    def readyz(self, timeout: float = 2) -> tuple[int, str]:
        """What `/readyz` answers now (status, body); (0, the error) when nothing does."""
        assert self.readiness_port is not None, "a fleet without readiness=True"
        conn = http.client.HTTPConnection(self.address, self.readiness_port, timeout=timeout)
        try:  # http.client: no proxy from the environment on loopback
            conn.request("GET", "/readyz")
            reply = conn.getresponse()
            return reply.status, reply.read().decode().strip()
        except OSError as e:
            return 0, str(e)
        finally:
            conn.close()

    def wait_ready(self, timeout: float = 30) -> str:
        """Until `/readyz` answers 200 (HAProxy runs an applied snapshot and its stick
        tables are synced from the peers, or the bound passed): its reason."""
        deadline = time.monotonic() + timeout
        while (answer := self.readyz())[0] != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.readyz_url} still answers {answer} after {timeout:.0f}s")
            time.sleep(0.2)
        return answer[1]

    @property
    def config(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def runtime_socket(self) -> Path:
        return self.directory / "runtime.sock"

    @property
    def master_socket(self) -> Path:
        return self.directory / "master.sock"

    @property
    def log(self) -> Path:
        return self.directory / "agent.log"

    def runtime(self, command: str) -> str:
        return unix_command(self.runtime_socket, command)


class Fleet:
    """The demo cluster on loopback, with its addresses moved to 127.<octet>.x.y."""

    def __init__(
        self,
        workdir: Path,
        octet: int = 0,
        quiet: bool = True,
        haproxy_bin: str | None = None,
        *,
        server_args: Sequence[str] = (),
        agent_args: Sequence[str] = (),
        state_file: bool = True,
        serve_timeout: float = 20,
        source: str | None = None,
        readiness: bool = False,
    ) -> None:
        """`readiness`: every agent serves `/readyz` (and its metrics) on its pod's address,
        port READYZ_PORT, as the DaemonSet's agents do on theirs.
        `server_args`/`agent_args` are appended to every `controlplane serve` /
        `nodeagent run` command line (the benchmarks' switches); `state_file=False` runs
        the control plane without `--state`, as a first-time user would; `source` replaces
        the manifests folder (`files:DIR`) as `--source` (say, `kubernetes`)."""
        self.source = source
        self.readiness = readiness
        self.workdir = workdir
        self.haproxy_bin = haproxy_bin  # None: the one on PATH (the demo's)
        self.server_args = list(server_args)
        self.agent_args = list(agent_args)
        self.state_file = state_file
        self.serve_timeout = serve_timeout
        self.octet = octet
        self.quiet = quiet
        self.manifests = workdir / "manifests"
        self.processes: list[subprocess.Popen[bytes]] = []
        self.agents: dict[str, AgentHandle] = {}
        self.backends = Backends()
        self.control_plane: subprocess.Popen[bytes] | None = None
        self.control_plane_address = f"127.0.0.1:{free_port()}"
        self._channel: grpc.Channel | None = None

    # addresses -------------------------------------------------------

    def ip(self, demo_address: str) -> str:
        """Where a demo address lives in this fleet."""
        return re.sub(r"^127\.0\.", f"127.{self.octet}.", demo_address)

    def write_manifests(self) -> None:
        shutil.copytree(DEMO, self.manifests, dirs_exist_ok=True)
        for path in self.manifests.glob("*.yaml"):
            text = path.read_text()
            path.write_text(re.sub(r"\b127\.0\.(\d+\.\d+)", rf"127.{self.octet}.\1", text))

    def edit_manifest(self, name: str, edit: Callable[[str], str], timeout: float = 30) -> str:
        """Rewrite one manifest atomically (the source never sees half a file), then wait
        for the new snapshot version and every running agent's ACK; the new hash."""
        before = self.snapshot().content_hash
        path = self.manifests / name
        text = path.read_text()
        changed = edit(text)
        assert changed != text, f"the edit of {name} changed nothing"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(changed)
        os.replace(tmp, path)
        wait_until(lambda: self.snapshot().content_hash != before, timeout, "a new version")
        return self.wait_all_acked(timeout)

    # processes -------------------------------------------------------

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True
            )
        self.processes.append(process)
        return process

    def start_backends(self, names: tuple[str, ...] | None = None) -> None:
        for name, address, port, kind in BACKENDS:
            if names is None or name in names:
                self.backends.start(name, self.ip(address), port, kind)

    def start_control_plane(self) -> None:
        if self.source is None and not self.manifests.exists():
            self.write_manifests()
        argv = [
            sys.executable,
            "-m",
            "controlplane.cli",
            "serve",
            "--source",
            self.source or f"files:{self.manifests}",
            "--listen",
            self.control_plane_address,
            "--insecure",  # plaintext on loopback
        ]
        if self.state_file:
            argv += ["--state", str(self.workdir / "slots.json")]
        argv += self.server_args
        self.control_plane = self._spawn(argv, self.workdir / "controlplane.log")
        wait_until(self._serving, self.serve_timeout, "the control plane to serve")

    def stop_control_plane(self) -> None:
        if self.control_plane is not None:
            stop_process(self.control_plane)
            self.control_plane = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def start_agent(
        self, pod_name: str, demo_address: str, extra_args: Sequence[str] = ()
    ) -> AgentHandle:
        directory = self.workdir / pod_name
        directory.mkdir(parents=True, exist_ok=True)
        address = self.ip(demo_address)
        argv = [
            sys.executable,
            "-m",
            "nodeagent.cli",
            "run",
            "--control-plane",
            self.control_plane_address,
            "--pod-namespace",
            NAMESPACE,
            "--pod-name",
            pod_name,
            "--node-name",
            f"node-{pod_name[-5:]}",
            "--config",
            str(directory / "haproxy.cfg"),
            "--state-dir",
            str(directory / "state"),
            "--master-socket",
            str(directory / "master.sock"),
            "--runtime-socket",
            str(directory / "runtime.sock"),
            "--bind-address",
            address,
            "--manage-haproxy",
            "--insecure",  # plaintext on loopback
        ]
        binary = self.haproxy_bin or haproxy_binary()
        if binary:
            argv += ["--haproxy-bin", binary]
        port = READYZ_PORT if self.readiness else None
        if port is not None:
            argv += ["--metrics-port", str(port), "--metrics-address", address]
        argv += [*self.agent_args, *extra_args]
        process = self._spawn(argv, directory / "agent.log")
        handle = AgentHandle(pod_name, address, directory, process, port)
        self.agents[pod_name] = handle
        return handle

    def stop_agent(self, pod_name: str) -> None:
        """Stops the agent, which stops the HAProxy it supervises: the instance is lost."""
        stop_process(self.agents[pod_name].process)

    def start(self) -> None:
        self.write_manifests()
        self.start_backends()
        self.start_control_plane()
        for name, address in HAPROXY_PODS:
            self.start_agent(name, address)
        self.wait_all_acked()

    def stop(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        # The agents (each stopping its HAProxy) at once, then the control plane: no
        # stream is left for it to drain, and the fleet's teardown waits for the slowest
        # agent, not for each one after the other.
        last = [p for p in self.processes if p is self.control_plane]
        first = [p for p in self.processes if p is not self.control_plane]
        with concurrent.futures.ThreadPoolExecutor() as pool:
            list(pool.map(stop_process, first))  # list(): a failure to stop is raised here
        for process in last:
            stop_process(process)
        self.processes.clear()
        for agent in self.agents.values():
            stop_orphaned_haproxy(agent.directory)
        self.backends.stop_all()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # control-plane API -----------------------------------------------

    @property
    def stub(self) -> peerplane_pb2_grpc.PeerPlaneStub:
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.control_plane_address)
        return peerplane_pb2_grpc.PeerPlaneStub(self._channel)

    def _serving(self) -> bool:
        try:
            return bool(self.stub.ListWorkloads(pb.ListWorkloadsRequest(), timeout=1).workloads)
        except grpc.RpcError:
            return False

    def snapshot(self) -> pb.Snapshot:
        found: pb.Snapshot = self.stub.GetSnapshot(
            pb.GetSnapshotRequest(workload=WORKLOAD), timeout=5
        )
        return found

    def agents_status(self) -> list[pb.AgentStatus]:
        return list(self.stub.ListAgents(pb.ListAgentsRequest(), timeout=5).agents)

    def wait_all_acked(self, timeout: float = 30) -> str:
        """Until every running agent acknowledged the current content; its hash."""
        state: dict[str, str] = {}

        def acked() -> bool:
            try:
                current = self.snapshot().content_hash
                status = {a.agent: a.acked_content_hash for a in self.agents_status()}
            except grpc.RpcError:
                return False
            state["hash"] = current
            running = [
                f"{NAMESPACE}/{name}"
                for name, agent in self.agents.items()
                if agent.process.poll() is None
            ]
            return bool(running) and all(status.get(a) == current for a in running)

        wait_until(acked, timeout, "every agent to acknowledge the current snapshot")
        return state["hash"]


@contextlib.contextmanager
def running_fleet(workdir: Path, octet: int, haproxy_bin: str | None = None) -> Iterator[Fleet]:
    fleet = Fleet(workdir, octet, haproxy_bin=haproxy_bin)
    try:
        fleet.start()
        yield fleet
    finally:
        fleet.stop()
