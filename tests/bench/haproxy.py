"""Agent and HAProxy: an endpoint change applied through the runtime API vs by a reload.

The node agent has not landed yet (nodeagent/ is empty), so this drives HAProxy 2.6 the
way the design says the agent does, with a minimal stand-in: render haproxy.cfg from the
slots, write it atomically (temp, fsync, rename), validate with `haproxy -c`, then either
`set server <b>/<s> addr .. port ..` + `state ready` on the admin socket and a
`show servers state` check (runtime path), or `reload` on the master CLI (reload path).

HAProxy runs in master-worker mode with a peers section (itself as local peer) and a
source-IP stick table, like a fleet member. Backend pods are a second HAProxy that answers
on several 127.0.50.x addresses with the address it was reached on. One slot (SRV_1) moves
between those addresses; the timer starts when the "snapshot" is in hand and stops at the
first request answered by the new address (each probe a new connection). Meanwhile a load
process sends requests on new connections as fast as it can and counts failures, one load
run per path.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench.common import Child, Result, log, median, percentile

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
FRONT = ("127.0.0.1", 0)
BACKEND_ADDRESSES = [f"127.0.50.{i}" for i in range(1, 5)]
BACKEND_PORT = 8888
BACKEND = "default_shop_http"
SLOTS = 42


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def render(work: Path, front_port: int, peer_port: int, address: str) -> str:
    """haproxy.cfg for one live slot (SRV_1 -> address) and 41 free ones."""
    servers = [f"  server SRV_1 {address}:{BACKEND_PORT} id 1 enabled"]
    servers += [f"  server SRV_{n} 127.0.0.1:1 id {n} disabled" for n in range(2, SLOTS + 1)]
    return "\n".join(
        [
            "global",
            f"  stats socket {work}/admin.sock mode 600 level admin expose-fd listeners",
            "  localpeer haproxy-a",
            "defaults",
            "  mode http",
            "  timeout connect 2s",
            "  timeout client 10s",
            "  timeout server 10s",
            "peers localinstance",
            f"  peer haproxy-a 127.0.0.1:{peer_port}",
            "frontend http",
            f"  bind 127.0.0.1:{front_port}",
            f"  default_backend {BACKEND}",
            f"backend {BACKEND}",
            "  balance source",
            "  stick on src",
            "  stick-table type ip size 1m expire 30m peers localinstance",
            *servers,
            "",
        ]
    )


def backends_config() -> str:
    binds = [f"  bind {a}:{BACKEND_PORT}" for a in BACKEND_ADDRESSES]
    return "\n".join(
        [
            "defaults",
            "  mode http",
            "  timeout connect 2s",
            "  timeout client 10s",
            "  timeout server 10s",
            "frontend pods",
            *binds,
            '  http-request return status 200 content-type text/plain lf-string "%[dst]"',
            "",
        ]
    )


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def unix_command(path: Path, command: str, timeout: float = 5.0) -> str:
    """One command on an HAProxy CLI socket; the whole answer."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def get(port: int, timeout: float = 2.0) -> str:
    """One HTTP/1.0 request on a new connection; the body, or "" on any failure."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
    except OSError:
        return ""
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    return body.decode() if len(status) > 1 and status[1] == b"200" else ""


def wait_serving(port: int, address: str, timeout: float = 5.0) -> float:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if get(port) == address:
            return time.monotonic()
    raise TimeoutError(f"{address} not serving within {timeout}s")


@dataclass
class Haproxy:
    """One master-worker HAProxy, started and stopped by PID."""

    work: Path
    config: Path
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, work: Path, config_text: str, name: str, extra: list[str]) -> Haproxy:
        config = work / f"{name}.cfg"
        write_atomically(config, config_text)
        log_file = open(work / f"{name}.log", "wb")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen(
            [HAPROXY, "-W", "-f", str(config), *extra], stdout=log_file, stderr=log_file
        )
        log_file.close()
        return cls(work, config, proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1)  # soft stop of master and workers
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def validate(config: Path) -> float:
    start = time.perf_counter()
    subprocess.run([HAPROXY, "-c", "-q", "-f", str(config)], check=True, timeout=10)
    return time.perf_counter() - start


def apply_runtime(work: Path, address: str) -> None:
    sock = work / "admin.sock"
    answer = unix_command(sock, f"set server {BACKEND}/SRV_1 addr {address} port {BACKEND_PORT}")
    if "changed" not in answer and "no need to change" not in answer:
        raise RuntimeError(f"set server addr: {answer.strip()}")
    answer = unix_command(sock, f"set server {BACKEND}/SRV_1 state ready")
    if answer.strip():
        raise RuntimeError(f"set server state: {answer.strip()}")
    state = unix_command(sock, f"show servers state {BACKEND}")
    if f" SRV_1 {address} " not in state:
        raise RuntimeError(f"show servers state does not show {address}")


def apply_reload(work: Path) -> None:
    unix_command(work / "master.sock", "reload")


def load_main(port: int) -> None:
    """Load process: requests until SIGTERM, then print ok/failed counts as JSON."""
    stopping = False

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    ok = failed = 0
    print('{"started": true}', flush=True)
    while not stopping:
        if get(port):
            ok += 1
        else:
            failed += 1
    print(f'{{"ok": {ok}, "failed": {failed}}}', flush=True)


def measure(path: str, changes: int, work: Path, ports: tuple[int, int]) -> dict[str, Any]:
    front_port, peer_port = ports
    config = work / "haproxy.cfg"
    timings: list[float] = []
    validation: list[float] = []
    load = Child(
        [sys.executable, "-m", "tests.bench.haproxy", "load", str(front_port)],
        work / f"load-{path}.log",
    )
    try:
        load.read(timeout=30)
        current = 0
        for _ in range(changes):
            current = (current + 1) % len(BACKEND_ADDRESSES)
            address = BACKEND_ADDRESSES[current]
            start = time.monotonic()  # the snapshot is in hand
            write_atomically(config, render(work, front_port, peer_port, address))
            validation.append(validate(config))
            if path == "runtime":
                apply_runtime(work, address)
            else:
                apply_reload(work)
            timings.append(wait_serving(front_port, address) - start)
            time.sleep(0.3 if path == "reload" else 0.05)  # old workers drain, peers resync
        load.proc.send_signal(signal.SIGTERM)
        counts = load.read(timeout=30)
    finally:
        load.stop()
    return {"timings": timings, "validation": validation, **counts}


def run(quick: bool = False) -> list[Result]:
    if not Path(HAPROXY).exists():
        raise RuntimeError(f"haproxy not found at {HAPROXY}")
    changes = 6 if quick else 50
    work = Path(tempfile.mkdtemp(prefix="bench-haproxy-"))
    front_port, peer_port = free_port(), free_port()
    pods = Haproxy.start(work, backends_config(), "pods", [])
    config_text = render(work, front_port, peer_port, BACKEND_ADDRESSES[0])
    fleet = Haproxy.start(
        work, config_text, "haproxy", ["-S", f"{work}/master.sock", "-L", "haproxy-a"]
    )
    os.replace(fleet.config, work / "haproxy.cfg")  # the agent's file from now on
    fleet.config = work / "haproxy.cfg"
    found: dict[str, dict[str, Any]] = {}
    try:
        wait_serving(front_port, BACKEND_ADDRESSES[0], timeout=10)
        for path in ("runtime", "reload"):
            found[path] = measure(path, changes, work, (front_port, peer_port))
            log(f"haproxy: {path} p50 {median(found[path]['timings']) * 1000:.1f} ms")
    finally:
        fleet.stop()
        pods.stop()
        shutil.rmtree(work, ignore_errors=True)
    results: list[Result] = []
    for path, data in found.items():
        params = {"changes": changes, "requests_ok": data["ok"], "load": "new conn/request"}
        timings = data["timings"]
        results += [
            Result(f"haproxy.{path}.received_to_serving_p50", median(timings) * 1000, "ms", params),
            Result(
                f"haproxy.{path}.received_to_serving_p99",
                percentile(timings, 99) * 1000,
                "ms",
                params,
            ),
            Result(
                f"haproxy.{path}.apply_to_serving_p50",
                median([t - v for t, v in zip(timings, data["validation"], strict=True)]) * 1000,
                "ms",
                {**params, "what": "without the haproxy -c validation"},
            ),
            Result(f"haproxy.{path}.failed_requests", data["failed"], "requests", params),
            Result(f"haproxy.{path}.validate_p50", median(data["validation"]) * 1000, "ms", params),
        ]
    ratio = median(found["reload"]["timings"]) / median(found["runtime"]["timings"])
    results.append(
        Result("haproxy.reload_over_runtime", ratio, "ratio", {"what": "p50 reload / p50 runtime"})
    )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", nargs="?", choices=["load"])
    parser.add_argument("port", nargs="?", type=int)
    args = parser.parse_args(argv)
    if args.command == "load":
        load_main(args.port)
        return
    from tests.bench.__main__ import main as bench_main

    raise SystemExit(bench_main(["haproxy"]))


if __name__ == "__main__":
    main()
