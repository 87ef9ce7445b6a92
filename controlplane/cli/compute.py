"""`controlplane compute`: one computation over a folder of manifests, printed as JSON.

With `--state FILE` the slot assignment is read before and written after, and no
snapshot is printed whose slots could not be saved.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from google.protobuf import json_format

from controlplane.cli.flag_types import SourceSpec
from controlplane.cli.wiring import workload_scope
from controlplane.compute import compute
from controlplane.ledger.sqlite import FileLedger, LedgerReadError
from controlplane.ledger.store import LedgerWriteError, MemoryLedger, SlotLedger
from controlplane.publish.encode import encode
from controlplane.source.files import load_manifests


def run_compute(args: argparse.Namespace) -> int:
    source: SourceSpec = args.source
    assert source.directory is not None  # flag_types.files_source accepts files:DIR only
    loaded = load_manifests(source.directory, args.configmap, args.haproxy_selector)
    for error in loaded.errors:
        print(f"controlplane: manifest skipped: {error}", file=sys.stderr)
    store: SlotLedger = FileLedger(args.state) if args.state else MemoryLedger()
    try:
        previous, problems = store.load()
    except LedgerReadError as err:
        print(f"controlplane: {err}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"controlplane: {problem}", file=sys.stderr)
    result = compute(loaded.state, previous, workload_scope(args), now=time.time())
    for rejection in result.rejections:
        print(
            f"controlplane: rejected {rejection.object} {rejection.key}={rejection.value!r}: "
            f"{rejection.reason}",
            file=sys.stderr,
        )
    snapshots = dict(result.workloads)
    if args.workload is not None:
        if args.workload not in snapshots:
            known = ", ".join(sorted(snapshots)) or "none"
            print(f"controlplane: no workload {args.workload!r} (known: {known})", file=sys.stderr)
            return 1
        snapshots = {args.workload: snapshots[args.workload]}
    documents = []
    for content in encode(snapshots).values():
        # A fresh computation: the first generation of every workload.
        documents.append(json_format.MessageToDict(content.message(version=1)))
    if args.state:
        try:
            store.save(result.assignment)
        except LedgerWriteError as err:
            # Snapshots whose slots are not persisted must not be used: print none.
            print(f"controlplane: cannot save slot state: {err}", file=sys.stderr)
            return 1
    output = documents[0] if args.workload is not None else documents
    json.dump(output, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0
