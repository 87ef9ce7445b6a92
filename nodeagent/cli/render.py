"""`nodeagent render`: the haproxy.cfg of a snapshot (protobuf JSON, as grpcurl prints it)."""

from __future__ import annotations

import argparse
import sys

from google.protobuf import json_format

from nodeagent.apply.applier import missing_local_peer
from nodeagent.cli import wiring
from nodeagent.config.render import RenderError, render
from nodeagent.haproxy import version
from peerplane.v1 import peerplane_pb2 as pb


def run_render(args: argparse.Namespace) -> int:
    """Print the config; 1 with HAProxy-free words when the snapshot or version is bad, or
    when its peers list lacks --pod-name (the check the running agent makes before it)."""
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
        sys.stdout.write(render(snapshot, wiring.render_options(args)))
    except (RenderError, version.VersionError) as e:
        print(f"nodeagent render: {e}", file=sys.stderr)
        return 1
    return 0
