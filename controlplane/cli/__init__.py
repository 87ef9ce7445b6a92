"""`controlplane` command line: `compute` prints snapshots, `serve` runs the control plane,
`status` shows every agent's sync state (`controlplane/status`).

`flags` holds every flag, `wiring` turns flags into objects, `lifecycle` runs `serve`,
`compute` runs `compute`. `main` is the console script.
"""

from __future__ import annotations

import logging
import sys

from controlplane.cli.flags import build_parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.command == "compute":
        from controlplane.cli.compute import run_compute as run
    elif args.command == "status":
        from controlplane.status.command import run_status as run
    else:
        from controlplane.cli.lifecycle import run_serve as run
    try:
        code: int = run(args)
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr.close()
        return 0
    return code
