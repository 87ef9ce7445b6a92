"""The certificate files and crt-lists beside haproxy.cfg: checked, staged, written, pruned.

`<certs dir>/<name>.pem` (mode 0600) and `<certs dir>/fe_<port>.crtlist`, in a 0700
directory. HAProxy reads them only at a start or reload, and the files must never hold what
`haproxy -c` has not accepted: a reload's check runs on a staging copy of the certificates
that change (the config checked names the staging crt-lists), and the live files are
replaced only once it passed. Every write is atomic. Errors name the certificate and its
fingerprint, never its bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from nodeagent.apply.outcome import ApplyError
from nodeagent.config import certcheck, certs
from nodeagent.held import Held
from peerplane.certs import fingerprint
from peerplane.runtime.durable import atomic_write
from peerplane.v1 import peerplane_pb2 as pb

FILE_MODE = 0o600
DIR_MODE = 0o700
_STAGING = ".staging-"


@dataclass(frozen=True)
class Staging:
    """Where a reload's check reads the certificates that change."""

    live: str  # the certificates directory
    staging: str  # "" when nothing is staged (no HTTPS listener)

    def config(self, cfg: str) -> str:
        """The config to check: its crt-lists are the staged ones."""
        if not self.staging:
            return cfg
        return cfg.replace(f" crt-list {self.live}/", f" crt-list {self.staging}/")

    def said(self, text: str) -> str:
        """HAProxy's words about the staged files, naming the live ones."""
        return text.replace(self.staging, self.live) if self.staging else text


def _certificates(held: Held | None) -> Mapping[str, pb.Certificate]:
    return held.certificates if held is not None else {}


class CertFiles:
    """The certificates directory of one HAProxy instance."""

    def __init__(self, certs_dir: str) -> None:
        self.certs_dir = certs_dir

    def problems(self, held: Held, names: frozenset[str] | None) -> dict[str, str]:
        """Why each certificate of `names` (None: all) cannot be served, by name, for those
        that cannot (checked before anything is written or sent)."""
        chosen = sorted(held.certificates if names is None else names & held.certificates.keys())
        found: dict[str, str] = {}
        for name in chosen:
            why = certcheck.problem(held.certificates[name].pem)
            if why is not None:
                found[name] = why
        return found

    def check(self, held: Held, names: frozenset[str] | None) -> None:
        """ApplyError (not retryable) for the first certificate of `names` (None: all) that
        cannot be served (`nodeagent render`: it writes all or nothing)."""
        for name, why in self.problems(held, names).items():
            fp = fingerprint(held.certificates[name].pem)
            raise ApplyError(f"certificate {name} (sha256 {fp[:16]}): {why}")

    def changed(self, held: Held, before: Held | None) -> list[str]:
        """The certificates whose live file is not the one `held` needs."""
        old = _certificates(before)
        out = []
        for name, cert in held.certificates.items():
            prev = old.get(name)
            same = prev is not None and (prev is cert or prev.pem == cert.pem)
            if not same or not os.path.exists(certs.cert_path(self.certs_dir, name)):
                out.append(name)
        return out

    def _dir(self) -> None:
        os.makedirs(self.certs_dir, mode=DIR_MODE, exist_ok=True)
        os.chmod(self.certs_dir, DIR_MODE)

    @contextlib.contextmanager
    def staged(self, held: Held, lists: certs.CrtLists, before: Held | None) -> Iterator[Staging]:
        """A staging copy of the changed certificates and of every crt-list (naming the
        staged files for those, the live ones for the others), for the check of the config
        `Staging.config` gives. Removed afterwards."""
        if not lists:
            yield Staging(self.certs_dir, "")
            return
        self._dir()
        staging = tempfile.mkdtemp(prefix=_STAGING, dir=self.certs_dir)
        try:
            changed = set(self.changed(held, before))
            for name in changed:
                path = certs.cert_path(staging, name)
                atomic_write(path, held.certificates[name].pem, FILE_MODE)
            for port, lines in lists.items():
                text = "".join(
                    certs.crtlist_line(staging if line.name in changed else self.certs_dir, line)
                    + "\n"
                    for line in lines
                )
                atomic_write(certs.crtlist_path(staging, port), text.encode(), FILE_MODE)
            yield Staging(self.certs_dir, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def write(
        self,
        held: Held | None,
        lists: certs.CrtLists,
        before: Held | None,
        before_lists: certs.CrtLists,
    ) -> None:
        """The live files of `held` and `lists` (those that differ from `before`'s or are
        missing), atomically. Retryable when it fails: a full disk may be repaired."""
        if held is None:
            return
        try:
            if held.certificates or lists:
                self._dir()
            for name in self.changed(held, before):
                path = certs.cert_path(self.certs_dir, name)
                atomic_write(path, held.certificates[name].pem, FILE_MODE)
            for port, lines in lists.items():
                path = certs.crtlist_path(self.certs_dir, port)
                if before_lists.get(port) == lines and os.path.exists(path):
                    continue
                atomic_write(path, certs.crtlist_file(self.certs_dir, lines), FILE_MODE)
        except OSError as e:
            raise ApplyError(
                f"cannot write the certificates in {self.certs_dir}: {e.strerror or e}",
                retryable=True,
            ) from e

    def prune(self, held: Held, lists: certs.CrtLists) -> None:
        """Remove the files of certificates and crt-lists no longer in the snapshot (after a
        successful apply: HAProxy no longer needs them), and staging left by a crash."""
        wanted = {f"{name}.pem" for name in held.certificates}
        wanted |= {os.path.basename(certs.crtlist_path(self.certs_dir, p)) for p in lists}
        try:
            entries = os.listdir(self.certs_dir)
        except FileNotFoundError:
            return
        for entry in entries:
            path = os.path.join(self.certs_dir, entry)
            if entry.startswith(_STAGING):
                shutil.rmtree(path, ignore_errors=True)
            elif entry.endswith((".pem", ".crtlist")) and entry not in wanted:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
