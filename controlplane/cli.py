"""`controlplane` command line: `compute` prints snapshots, `serve` runs the control plane."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from google.protobuf import json_format

from controlplane.compute import compute
from controlplane.slotstore import FileSlotStore, MemorySlotStore, SlotStore
from controlplane.source.files import load_manifests
from controlplane.sourceargs import add_source_arguments, workload_scope


def files_directory(spec: str) -> Path:
    """The folder of a `files:DIR` source spec; argparse type."""
    kind, sep, rest = spec.partition(":")
    if kind != "files" or not sep or not rest:
        raise argparse.ArgumentTypeError(f"expected files:DIR, got {spec!r}")
    return Path(rest)


def run_compute(args: argparse.Namespace) -> int:
    loaded = load_manifests(args.source, args.configmap, args.haproxy_selector)
    for error in loaded.errors:
        print(f"controlplane: manifest skipped: {error}", file=sys.stderr)
    store: SlotStore = FileSlotStore(args.state) if args.state else MemorySlotStore()
    previous, problems = store.load()
    for problem in problems:
        print(f"controlplane: {problem}", file=sys.stderr)
    result = compute(loaded.state, previous, workload_scope(args), now=time.time())
    for rejection in result.rejections:
        print(
            f"controlplane: rejected {rejection.object} {rejection.key}={rejection.value!r}: "
            f"{rejection.reason}",
            file=sys.stderr,
        )
    snapshots = dict(result.snapshots)
    if args.workload is not None:
        if args.workload not in snapshots:
            known = ", ".join(sorted(snapshots)) or "none"
            print(f"controlplane: no workload {args.workload!r} (known: {known})", file=sys.stderr)
            return 1
        snapshots = {args.workload: snapshots[args.workload]}
    documents = []
    for content in snapshots.values():
        # A fresh computation: the first generation of every workload.
        documents.append(json_format.MessageToDict(content.message(version=1)))
    if args.state:
        try:
            store.save(result.assignment)
        except OSError as err:
            # Snapshots whose slots are not persisted must not be used: print none.
            reason = err.strerror or str(err)
            print(f"controlplane: cannot save slot state {args.state}: {reason}", file=sys.stderr)
            return 1
    output = documents[0] if args.workload is not None else documents
    json.dump(output, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="controlplane",
        description="Control plane for HAProxy fleets: canonical peers and server slots.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    compute_parser = commands.add_parser(
        "compute", help="print the snapshots computed for a folder of manifests as JSON"
    )
    compute_parser.add_argument(
        "--source", type=files_directory, required=True, help="files:DIR, a manifest folder"
    )
    compute_parser.add_argument(
        "--workload", help="print only this workload's snapshot (namespace/Kind/name)"
    )
    add_source_arguments(compute_parser)
    compute_parser.set_defaults(run=run_compute)

    serve_parser = commands.add_parser("serve", help="run the control plane (gRPC)")
    try:
        from controlplane.serve import add_serve_arguments, run_serve
    except ImportError:  # pragma: no cover - only while serve is not built
        serve_parser.set_defaults(run=lambda _args: _unavailable())
    else:
        add_serve_arguments(serve_parser)
        serve_parser.set_defaults(run=run_serve)
    return parser


def _unavailable() -> int:
    print("controlplane: serve is not available in this build", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
