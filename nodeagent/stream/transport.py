"""How the agent reaches the control plane: TLS (or explicit plaintext) and its token.

The projected ServiceAccount token rotates, so it is read again for every connection and
sent as `authorization: Bearer <token>` on the Stream call.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import grpc
import grpc.aio

from nodeagent.safefile import read_regular

log = logging.getLogger(__name__)

DEFAULT_TOKEN_FILE = "/var/run/secrets/peerplane/token"
MAX_TOKEN_BYTES = 64 * 1024  # the control plane refuses tokens above 16 KiB anyway
NO_TRANSPORT = (
    "the connection to the control plane needs TLS: pass --ca FILE (the CA that signed the "
    "server certificate; add --client-cert/--client-key for mTLS), or --insecure for "
    "plaintext (development only)"
)


class TokenError(Exception):
    """The token file named on the command line cannot be read."""


def check(args: argparse.Namespace) -> str | None:
    """The reason the transport flags (`cli/flags.py`) cannot work
    together, or None."""
    if args.insecure and args.ca:
        return "--insecure contradicts --ca: choose one"
    if not args.insecure and not args.ca:
        return NO_TRANSPORT
    if (args.client_cert is None) != (args.client_key is None):
        return "--client-cert and --client-key go together"
    if args.insecure and (args.client_cert or args.server_name):
        return "--client-cert and --server-name need --ca (TLS)"
    return None


@dataclass(frozen=True)
class Transport:
    """Channel security and the token file; `insecure()` for plaintext."""

    ca: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    server_name: str | None = None
    token_file: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Transport:
        """Read the PEM files now (OSError when unreadable): fail at start, not later."""

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        token_file = args.token_file
        if token_file is None and os.path.exists(DEFAULT_TOKEN_FILE):
            token_file = DEFAULT_TOKEN_FILE
        return cls(
            ca=None if args.insecure else read(args.ca),
            client_cert=read(args.client_cert),
            client_key=read(args.client_key),
            server_name=args.server_name,
            token_file=token_file or None,
        )

    @property
    def secure(self) -> bool:
        return self.ca is not None

    def channel(
        self, target: str, options: Sequence[tuple[str, str | int]] = ()
    ) -> grpc.aio.Channel:
        opts: list[tuple[str, str | int]] = list(options)
        if self.ca is None:
            return grpc.aio.insecure_channel(target, options=opts)
        if self.server_name:
            opts.append(("grpc.ssl_target_name_override", self.server_name))
        creds = grpc.ssl_channel_credentials(self.ca, self.client_key, self.client_cert)
        return grpc.aio.secure_channel(target, creds, options=opts)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata for one Stream: the token as read right now (rotation). Every
        problem with the file is a TokenError, which the client retries with backoff: a
        FIFO must not block the event loop (signals, health), bad bytes must not end it."""
        if self.token_file is None:
            return ()
        try:
            data = read_regular(self.token_file, MAX_TOKEN_BYTES)
        except OSError as e:
            raise TokenError(f"cannot read token file {self.token_file}: {e}") from e
        try:
            token = data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise TokenError(
                f"token file {self.token_file} is not a token (not ASCII text)"
            ) from None
        if not token:
            raise TokenError(f"token file {self.token_file} is empty")
        if not token.isprintable():  # gRPC metadata values are printable ASCII
            raise TokenError(f"token file {self.token_file} holds control characters")
        return (("authorization", f"Bearer {token}"),)
