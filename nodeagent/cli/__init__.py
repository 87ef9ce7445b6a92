"""`nodeagent` command line: `run` is the agent beside one HAProxy, `render` prints the
haproxy.cfg of a snapshot.

`flags` holds every flag, `wiring` turns flags into objects, `lifecycle` runs `run`,
`render` runs `render`. `main` is the console script.
"""

from __future__ import annotations

import logging
import sys

from nodeagent import logformat
from nodeagent.cli.flags import build_parser

log = logging.getLogger("nodeagent")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logformat.configure(args.log_level, getattr(args, "log_format", "text"))
    if args.command == "render":
        from nodeagent.cli.render import run_render

        return run_render(args)
    from nodeagent.cli.lifecycle import run_agent

    return run_agent(args)


if __name__ == "__main__":
    sys.exit(main())
