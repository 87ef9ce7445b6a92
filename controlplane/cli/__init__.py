"""`controlplane` command line: `compute` prints snapshots, `serve` runs the control plane,
`status` shows every agent's sync state (`controlplane/fleetstatus`).

`flags` holds every flag, `wiring` turns flags into objects, `lifecycle` runs `serve`,
`compute` runs `compute`. `main` is the console script.
"""

from __future__ import annotations

import logging
import sys


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["status"]:  # without the serve flags' imports: half its start time
        from controlplane.fleetstatus.command import main as status_main

        return status_main(given[1:])
    from controlplane.cli.flags import build_parser

    args = build_parser().parse_args(argv)
    if args.command == "compute":
        from controlplane.cli.compute import run_compute as run
    else:
        from controlplane.cli.lifecycle import run_serve as run
    try:
        code: int = run(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    return code
