"""`controlplane serve` as a subprocess: started, read and stopped by PID, bounded in time."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class ServeProcess:
    """`with ServeProcess(args) as p:` runs `controlplane serve ARGS --listen 127.0.0.1:0`."""

    def __init__(self, *args: str, insecure: bool = True) -> None:
        transport = ["--insecure"] if insecure else []
        self.args = [
            str(BIN / "controlplane"),
            "serve",
            "--listen",
            "127.0.0.1:0",
            *transport,
            *args,
        ]
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> ServeProcess:
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = int(self.wait_for(LISTENING).group(1))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _pump(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 15.0) -> re.Match[str]:
        """The first log line (seen or still to come) matching `pattern`."""
        for line in self.lines:
            if found := pattern.search(line):
                return found
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError("controlplane exited:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if found := pattern.search(line):
                return found
        raise AssertionError(f"no log line matching {pattern.pattern!r}:\n" + "\n".join(self.lines))

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM by PID; the exit code."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def read_to_end(self, timeout: float = 15.0) -> list[str]:
        """Every line the exited process wrote, in `lines` (which otherwise holds only the
        lines `wait_for` has read): a test asserting on the whole log calls it after
        `terminate`."""
        deadline = time.monotonic() + timeout
        while (line := self._queue.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
            self.lines.append(line)
        return self.lines


def grpcurl(
    address: str,
    *command: str,
    data: str | None = None,
    timeout: float = 15.0,
    tls: list[str] | None = None,
) -> str:
    """`grpcurl -plaintext [-d DATA] ADDRESS COMMAND...` (`tls`: TLS options instead of
    -plaintext); stdout, failing on a non-zero exit."""
    transport = ["-plaintext"] if tls is None else tls
    options = [*transport, *(["-d", data] if data is not None else [])]
    done = subprocess.run(
        [str(BIN / "grpcurl"), *options, address, *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
