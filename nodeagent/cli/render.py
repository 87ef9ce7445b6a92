"""`nodeagent render`: the haproxy.cfg of a snapshot (protobuf JSON, as grpcurl prints it)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from google.protobuf import json_format

from nodeagent.apply.certfiles import CertFiles
from nodeagent.apply.outcome import ApplyError
from nodeagent.apply.peers import missing_local_peer
from nodeagent.cli import wiring
from nodeagent.config.listeners import map_file
from nodeagent.config.render import Rendered, RenderError, render_held
from nodeagent.haproxy import version
from nodeagent.held import DeltaError, Held
from peerplane.v1 import peerplane_pb2 as pb


def run_render(args: argparse.Namespace) -> int:
    """Print the config (and with --maps-dir / --certs-dir write the route map files,
    crt-lists and certificates it names); 1 with HAProxy-free words when the snapshot,
    version or a certificate is bad, or when its peers list lacks --pod-name (the check
    the running agent makes before it)."""
    if args.snapshot == "-":
        text = sys.stdin.read()
    else:
        with open(args.snapshot, encoding="utf-8") as f:
            text = f.read()
    snapshot = json_format.Parse(text, pb.Snapshot(), ignore_unknown_fields=True)
    # What the running agent NACKs is refused here too: HAProxy would drop such a section.
    missing = missing_local_peer(snapshot.peers, args.pod_name)
    if missing is not None:
        print(f"nodeagent render: {missing}", file=sys.stderr)
        return 1
    try:
        opts = wiring.render_options(args)
        held = Held.from_snapshot(snapshot)
        rendered = render_held(held, opts)
    except (RenderError, version.VersionError, DeltaError) as e:
        print(f"nodeagent render: {e}", file=sys.stderr)
        return 1
    if args.maps_dir:
        # The files the config names, as the agent writes them beside its haproxy.cfg.
        try:
            os.makedirs(opts.maps_dir, exist_ok=True)
            for path, entries in rendered.maps.items():
                with open(path, "wb") as f:
                    f.write(map_file(entries))
        except OSError as e:
            print(f"nodeagent render: cannot write the route maps: {e}", file=sys.stderr)
            return 1
    if args.certs_dir and not _write_certificates(held, rendered, opts.certs_dir):
        return 1
    sys.stdout.write(rendered.text())
    return 0


def _write_certificates(held: Held, rendered: Rendered, certs_dir: str) -> bool:
    """The crt-lists and the certificates that hold PEM (checked first, as the agent does),
    as the agent writes them beside its haproxy.cfg; a certificate without PEM (cleared in
    GetSnapshot answers) is said on stderr, not written."""
    empty = sorted(name for name, cert in held.certificates.items() if not cert.pem)
    with_pem = dataclasses.replace(
        held, certificates={n: c for n, c in held.certificates.items() if c.pem}
    )
    files = CertFiles(certs_dir)
    try:
        files.check(with_pem, None)
        files.write(with_pem, rendered.crt_lists, None, {})
    except ApplyError as e:
        print(f"nodeagent render: {e.reason}", file=sys.stderr)
        return False
    for name in empty:
        print(f"nodeagent render: certificate {name} holds no PEM; not written", file=sys.stderr)
    return True
