"""Certificates and crt-lists changed through the runtime API, without a reload.

The same commands and replies on 2.6, 3.0 and 3.2 (checked on each): `new ssl cert`
("New empty certificate store"), `set ssl cert <path> <<` + the PEM ("Transaction
created"), `commit ssl cert` ("Success!"; a key that is not the certificate's: "Can't
commit"), `abort ssl cert`, `add ssl crt-list <crtlist> <<` + a line ("Success!"),
`del ssl crt-list <crtlist> <path>` and `del ssl cert <path>` ("deleted"). A reply
without its word is a refusal: the transaction is aborted and the applier reloads instead.
Connections already open keep the certificate they were made with; new handshakes get the
committed one. Errors and logs name the certificate and its fingerprint, never its bytes.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable

from nodeagent.haproxy import HAProxyError
from nodeagent.haproxy.commands import CertUpdate

log = logging.getLogger(__name__)

_PATH = re.compile(r"/[A-Za-z0-9_./-]{1,500}")
_LINE = re.compile(r"/[A-Za-z0-9_./-]{1,500}( [a-z0-9*][a-z0-9.-]{0,252})*")

Send = Callable[[str], str]  # one command on the runtime socket -> HAProxy's reply


def payload(pem: bytes) -> str:
    """The PEM as a runtime API payload: the CLI ends a payload at its first empty line,
    so empty lines (which PEM readers skip) are left out."""
    return "\n".join(line for line in pem.decode("ascii").splitlines() if line.strip())


def _said(reply: str) -> str:
    """HAProxy's reply, for an error text: one line, bounded, and never PEM."""
    if "-----BEGIN" in reply:
        return "(reply withheld: it quotes PEM)"
    return " ".join(reply.split())[:200] or "no reply"


def _expect(send: Send, cmd: str, word: str, what: str) -> None:
    reply = send(cmd)
    if word not in reply:
        raise HAProxyError(f"{what} refused: {_said(reply)}")


def _checked(update: CertUpdate) -> CertUpdate:
    if not _PATH.fullmatch(update.path):
        raise HAProxyError(f"refusing certificate path of {update.name[:80]!r}")
    if update.crtlist and not _PATH.fullmatch(update.crtlist):
        raise HAProxyError(f"refusing crt-list path for {update.name[:80]!r}")
    if update.line and not _LINE.fullmatch(update.line):
        raise HAProxyError(f"refusing crt-list line for {update.name[:80]!r}")
    return update


def _store(send: Send, u: CertUpdate) -> None:
    """`set ssl cert` + `commit ssl cert`; the transaction aborted on any refusal."""
    what = f"certificate {u.name} (sha256 {u.fingerprint[:16]})"
    try:
        _expect(send, f"set ssl cert {u.path} <<\n{payload(u.pem)}\n", "Transaction", what)
        _expect(send, f"commit ssl cert {u.path}", "Success!", what)
    except (OSError, HAProxyError):
        with contextlib.suppress(OSError):
            send(f"abort ssl cert {u.path}")
        raise


def update_certificates(send: Send, updates: Iterable[CertUpdate]) -> None:
    """Run the steps in order (as `certs.cert_updates` gives them); every path and line is
    checked before the first command. HAProxyError at the first refusal."""
    steps = [_checked(u) for u in updates]
    for u in steps:
        log.info("runtime %s certificate %s sha256 %.16s", u.op, u.name, u.fingerprint)
        if u.op == "load":
            _expect(send, f"new ssl cert {u.path}", "New empty", f"new certificate {u.name}")
            _store(send, u)
        elif u.op == "set":
            _store(send, u)
        elif u.op == "add":
            what = f"crt-list line of {u.name}"
            _expect(send, f"add ssl crt-list {u.crtlist} <<\n{u.line}\n", "Success!", what)
        elif u.op == "del":
            what = f"crt-list removal of {u.name}"
            _expect(send, f"del ssl crt-list {u.crtlist} {u.path}", "deleted", what)
        elif u.op == "unload":
            _expect(send, f"del ssl cert {u.path}", "deleted", f"removal of certificate {u.name}")
        else:
            raise HAProxyError(f"unknown certificate step {u.op!r}")
