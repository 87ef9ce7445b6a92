"""A loopback TCP forwarder a test can hold and cut: a network between a client and a server.

`hold()` stops the bytes both ways while every connection stays open (a client waiting on a
watch hears nothing, as behind a stalled network); `cut()` closes every open connection and
lets new ones through again. TLS passes through untouched, so a client keeps verifying the
server's certificate (which must name 127.0.0.1).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

CHUNK = 65536


class TcpGate:
    """Forwards 127.0.0.1:`port` to `target`; close() (or `with`) stops it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self.connections = 0  # accepted so far
        threading.Thread(target=self._accept, name="tcp-gate", daemon=True).start()

    def hold(self) -> None:
        self._flowing.clear()

    def cut(self) -> None:
        with self._lock:
            sockets, self._open = list(self._open), set()
        for sock in sockets:
            _close(sock)
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        _close(self._listener)
        self.cut()

    def __enter__(self) -> TcpGate:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                near, _ = self._listener.accept()
            except OSError:
                return
            try:
                far = socket.create_connection(self._target, timeout=5)
            except OSError:
                _close(near)
                continue
            far.settimeout(None)
            with self._lock:
                self._open.update((near, far))
                self.connections += 1
            for source, sink in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                while not self._flowing.wait(0.1):
                    if self._closed:
                        return
                with self._lock:
                    if sink not in self._open:
                        return  # cut while held: what was in flight is lost
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # A peer that goes away while held (a server restarted behind the gate) is
            # not heard of until the gate flows again or is cut.
            while not self._flowing.wait(0.1) and not self._closed:
                pass
            with self._lock:
                live = source in self._open
                self._open.difference_update((source, sink))
            if live:
                _close(source)
                _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()
