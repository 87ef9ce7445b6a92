"""Repair a deleted runtime socket (the admin `stats socket` file).

A reload never recreates the file: the new worker inherits the listening descriptor of
the old one, matched by the configured path, so a deleted file stays deleted and every
slot change would fall back to a reload with the peers sync check skipped. A reload whose
config spells the same path differently (`dir/./name`) matches no inherited descriptor,
so the new worker binds a fresh socket at the path; the next reload, with the usual
spelling, inherits that one. Verified on HAProxy 2.6, 3.0 and 3.2
(tests/agent/test_socket_repair.py).
"""

from __future__ import annotations

import os
import re
import socket

MAX_SOCKET_PATH = 107  # bytes in sockaddr_un.sun_path, without the NUL
# A busy HAProxy answers late, not never. With 1 s, one under load (8,000 backends, a
# `show table` of ~120 ms ahead of the question on a loaded host) was taken for a lost
# socket and reloaded: 15 to 45 s for an endpoint change instead of a runtime update.
# Still below a runtime command's 5 s (`driver.command`): a stuck socket costs one wait.
ANSWER_TIMEOUT_S = 3.0


def answers(path: str, timeout: float = ANSWER_TIMEOUT_S) -> bool:
    """True when the UNIX socket `path` answers a command within `timeout`. Accepting is
    not enough: a socket whose process is stuck (or that is not HAProxy's) accepts and
    never answers, and every command sent to it would wait for its own timeout. A
    missing file or a refused connection answers False at once."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(b"show info\n")
            sock.shutdown(socket.SHUT_WR)
            return bool(sock.recv(1))
        except OSError:
            return False


def socket_path_ok(path: str) -> bool:
    """Whether `path` fits a UNIX socket address; checked at start for a clear message."""
    return len(os.fsencode(os.path.abspath(path))) <= MAX_SOCKET_PATH


def rebind_spelling(path: str) -> str | None:
    """`path` spelled so that no inherited descriptor matches it; None if too long."""
    head, name = os.path.split(path)
    spelled = os.path.join(head, ".", name)
    return spelled if len(os.fsencode(spelled)) <= MAX_SOCKET_PATH else None


def rebinding_config(cfg: str, path: str) -> str | None:
    """`cfg` with its `stats socket <path>` line re-spelled; None when it cannot be."""
    spelled = rebind_spelling(path)
    if spelled is None:
        return None
    line = re.compile(rf"^(\s*stats socket ){re.escape(path)}(\s)", re.MULTILINE)
    new, count = line.subn(lambda m: f"{m.group(1)}{spelled}{m.group(2)}", cfg)
    return new if count == 1 else None
