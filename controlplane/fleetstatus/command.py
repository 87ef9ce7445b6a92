"""`controlplane status`: is every HAProxy on the latest version, which one is not and
why, are its peers connected and its stick tables filled. Asks the inspection API
(`client.py`), builds the rows (`rows.py`), prints them (`render.py`); `--diff A B`
prints what changed between two versions of a workload (`diff.py`).

Exit status: 0 all well, 1 an agent NACKED or STALE longer than `--stale-after` (or
an asked version is gone), 2 the control plane could not be asked or the flags are
wrong.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from datetime import UTC, datetime

from controlplane.fleetstatus import diff, render, rows
from controlplane.fleetstatus.client import Inspector, StatusError

DEFAULT_CONTROL_PLANE = "127.0.0.1:18000"


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} seconds: must be > 0 and <= 86400")
    return value


def _version(text: str) -> int:
    try:
        value = int(text.removeprefix("v"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a version number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"versions start at 1, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `controlplane status`; the transport ones are the agent's."""
    parser.add_argument(
        "--control-plane",
        default=DEFAULT_CONTROL_PLANE,
        metavar="HOST:PORT",
        help=f"the control plane's gRPC address (default {DEFAULT_CONTROL_PLANE})",
    )
    parser.add_argument("--workload", default="", help="only this workload (namespace/Kind/name)")
    parser.add_argument(
        "--diff",
        nargs=2,
        type=_version,
        metavar=("A", "B"),
        help="what changed from version A to version B of --workload",
    )
    parser.add_argument("--output", choices=("text", "json"), default="text")
    parser.add_argument(
        "--stale-after",
        type=_positive_seconds,
        default=rows.DEFAULT_STALE_AFTER_S,
        help="exit 1 when an agent has not acknowledged a version for this long "
        f"(default {rows.DEFAULT_STALE_AFTER_S:g} s)",
    )
    parser.add_argument(
        "--timeout", type=_positive_seconds, default=10.0, help="seconds per call (default 10)"
    )
    tls = parser.add_argument_group("transport security (one of --ca or --insecure)")
    tls.add_argument("--ca", help="PEM CA bundle that signed the control plane's certificate")
    tls.add_argument("--client-cert", help="PEM client certificate (mTLS)")
    tls.add_argument("--client-key", help="PEM private key of --client-cert")
    tls.add_argument("--server-name", help="TLS name to expect instead of the target's host")
    tls.add_argument("--insecure", action="store_true", help="plaintext gRPC (loopback)")
    tls.add_argument(
        "--token-file",
        help="bearer token for the inspection API (a token of an HAProxy pod is refused)",
    )


def main(argv: list[str]) -> int:
    """`controlplane status ARGV` on its own parser (the same flags `controlplane --help`
    lists), so that it starts without importing what `serve` needs."""
    parser = argparse.ArgumentParser(
        prog="controlplane status",
        description="every agent's sync state and persistence health, worst first",
    )
    add_arguments(parser)
    try:
        return run_status(parser.parse_args(argv))
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0


def run_status(args: argparse.Namespace) -> int:
    if args.diff and not args.workload:
        print("controlplane status: --diff needs --workload", file=sys.stderr)
        return 2
    try:
        inspector = Inspector.connect(args)
    except StatusError as e:
        print(f"controlplane status: {e}", file=sys.stderr)
        return 2
    try:
        if args.diff:
            return _diff(inspector, args.workload, *args.diff)
        return _status(inspector, args)
    except StatusError as e:
        print(f"controlplane status: {e}", file=sys.stderr)
        return 2
    finally:
        inspector.close()


def _status(inspector: Inspector, args: argparse.Namespace) -> int:
    workloads = inspector.workloads()
    agents = inspector.agents(args.workload)
    agent_rows = rows.agent_rows(list(agents.agents), datetime.now(UTC), args.workload)
    workload_rows = rows.workload_rows(list(workloads.workloads), agent_rows, args.workload)
    if args.workload and not workload_rows:
        known = ", ".join(w.workload for w in workloads.workloads) or "none"
        print(
            f"controlplane status: workload {args.workload!r} is not known; known: {known}",
            file=sys.stderr,
        )
        return 2
    found = rows.problems(agent_rows, args.stale_after)
    if args.output == "json":
        sys.stdout.write(render.as_json(workload_rows, agent_rows, found, args.stale_after))
    else:
        width = shutil.get_terminal_size((120, 24)).columns
        sys.stdout.write(render.text(workload_rows, agent_rows, width, found))
    return 1 if found else 0


def _diff(inspector: Inspector, workload: str, a: int, b: int) -> int:
    try:
        old = inspector.snapshot(workload, a)
        new = inspector.snapshot(workload, b)
    except StatusError as e:
        if "NOT_FOUND" in str(e):
            print(f"controlplane status: {e}", file=sys.stderr)
            return 1
        raise
    sys.stdout.write("\n".join(diff.diff(old, new)) + "\n")
    return 0
