"""The gRPC side of `controlplane status`: the inspection API over the same transport the
agent uses (TLS with `--ca`, mTLS with `--client-cert/--client-key`, `--server-name`,
or `--insecure`; a bearer token from `--token-file`), one call at a time, bounded by
`--timeout`."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import grpc

from peerplane.v1 import peerplane_pb2 as pb
from peerplane.v1 import peerplane_pb2_grpc

DEFAULT_TOKEN_FILE = "/var/run/secrets/peerplane/token"  # as the agent's default
MAX_TOKEN_BYTES = 64 * 1024
MAX_RECEIVE_BYTES = 64 * 1024 * 1024  # a large workload's snapshot (--diff)


class StatusError(Exception):
    """The control plane could not be asked, or refused: the text says which and why."""


def check(args: argparse.Namespace) -> str | None:
    """Why the transport flags cannot work together, or None (the agent's rules)."""
    if args.insecure and args.ca:
        return "--insecure contradicts --ca: choose one"
    if not args.insecure and not args.ca:
        return "pass --ca FILE (TLS; --client-cert/--client-key for mTLS) or --insecure"
    if (args.client_cert is None) != (args.client_key is None):
        return "--client-cert and --client-key go together"
    if args.insecure and (args.client_cert or args.server_name):
        return "--client-cert and --server-name need --ca (TLS)"
    return None


def _read(path: str, what: str, limit: int = 1 << 20) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise StatusError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise StatusError(f"{what} {path} is larger than {limit} bytes")
    return data


def _token(args: argparse.Namespace) -> str | None:
    path = args.token_file
    if path is None and os.path.exists(DEFAULT_TOKEN_FILE):
        path = DEFAULT_TOKEN_FILE
    if not path:
        return None
    try:
        token = _read(path, "token file", MAX_TOKEN_BYTES).decode("ascii").strip()
    except UnicodeDecodeError:
        raise StatusError(f"token file {path} is not a token (not ASCII text)") from None
    if not token or not token.isprintable():
        raise StatusError(f"token file {path} is empty or holds control characters")
    return token


@dataclass
class Inspector:
    """A channel to the control plane and the calls `status` makes."""

    channel: grpc.Channel
    metadata: tuple[tuple[str, str], ...]
    timeout: float
    target: str

    @classmethod
    def connect(cls, args: argparse.Namespace) -> Inspector:
        problem = check(args)
        if problem:
            raise StatusError(problem)
        options: list[tuple[str, str | int]] = [
            ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES)
        ]
        token = _token(args)
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        if args.insecure:
            channel = grpc.insecure_channel(args.control_plane, options=options)
        else:
            if args.server_name:
                options.append(("grpc.ssl_target_name_override", args.server_name))
            creds = grpc.ssl_channel_credentials(
                _read(args.ca, "CA bundle"),
                _read(args.client_key, "client key") if args.client_key else None,
                _read(args.client_cert, "client certificate") if args.client_cert else None,
            )
            channel = grpc.secure_channel(args.control_plane, creds, options=options)
        return cls(channel, metadata, args.timeout, args.control_plane)

    def close(self) -> None:
        self.channel.close()

    def _call(self, name: str, request: object) -> object:
        method = getattr(peerplane_pb2_grpc.PeerPlaneStub(self.channel), name)
        try:
            return method(request, timeout=self.timeout, metadata=self.metadata or None)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            details = e.details() if hasattr(e, "details") else str(e)
            name_of = code.name if code is not None else "ERROR"
            raise StatusError(f"{name} on {self.target}: {name_of}: {details}") from None

    def workloads(self) -> pb.ListWorkloadsResponse:
        found = self._call("ListWorkloads", pb.ListWorkloadsRequest())
        assert isinstance(found, pb.ListWorkloadsResponse)
        return found

    def agents(self, workload: str = "") -> pb.ListAgentsResponse:
        found = self._call("ListAgents", pb.ListAgentsRequest(workload=workload))
        assert isinstance(found, pb.ListAgentsResponse)
        return found

    def snapshot(self, workload: str, version: int) -> pb.Snapshot:
        found = self._call("GetSnapshot", pb.GetSnapshotRequest(workload=workload, version=version))
        assert isinstance(found, pb.Snapshot)
        return found
