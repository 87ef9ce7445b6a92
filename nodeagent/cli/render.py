"""`nodeagent render`: the haproxy.cfg of a snapshot (protobuf JSON, as grpcurl prints it)."""

from __future__ import annotations

import argparse
import os
import sys

from google.protobuf import json_format

from nodeagent.apply.applier import missing_local_peer
from nodeagent.cli import wiring
from nodeagent.config.render import RenderError, render_held
from nodeagent.config.routes import map_file
from nodeagent.haproxy import version
from nodeagent.held import DeltaError, Held
from peerplane.v1 import peerplane_pb2 as pb


def run_render(args: argparse.Namespace) -> int:
    """Print the config (and with --maps-dir write the route map files it names); 1 with
    HAProxy-free words when the snapshot or version is bad, or when its peers list lacks
    --pod-name (the check the running agent makes before it)."""
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
        rendered = render_held(Held.from_snapshot(snapshot), opts)
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
    sys.stdout.write(rendered.text())
    return 0
