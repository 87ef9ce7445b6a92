"""Every flag of the `nodeagent` command line, and nothing else.

What the flags build is in `wiring.py`, the process that runs them in `lifecycle.py` and
`render.py`. Pod identity defaults come from the downward API's environment.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from nodeagent import logformat
from nodeagent.haproxy import version
from nodeagent.stream.transport import DEFAULT_TOKEN_FILE

MAX_SECONDS = 3600.0  # an hour: longer is a typo, and `nan`/`inf` never end a wait

DESCRIPTION = "`nodeagent run` (the agent beside one HAProxy) and `nodeagent render` (inspection)."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nodeagent", description=DESCRIPTION)
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(
        sub.add_parser("run", help="stream snapshots from the control plane into HAProxy")
    )
    add_render_arguments(sub.add_parser("render", help="print the haproxy.cfg of a snapshot"))
    return parser


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--control-plane", required=True, metavar="HOST:PORT")
    run.add_argument("--pod-namespace", default=os.environ.get("POD_NAMESPACE", ""))
    run.add_argument("--pod-name", default=os.environ.get("POD_NAME", ""))
    run.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    run.add_argument("--config", required=True, help="haproxy.cfg path the agent owns")
    run.add_argument("--state-dir", required=True, help="where the applied snapshot is kept")
    run.add_argument("--haproxy-bin", default="/usr/sbin/haproxy")
    run.add_argument("--master-socket", help="master CLI socket (default STATE_DIR/master.sock)")
    run.add_argument("--runtime-socket", help="runtime API socket (default STATE_DIR/runtime.sock)")
    run.add_argument("--bind-address", default="0.0.0.0", help="address frontends bind to")
    run.add_argument(
        "--manage-haproxy",
        action="store_true",
        help="start and supervise HAProxy (master-worker) instead of driving an external one",
    )
    run.add_argument(
        "--sync-wait",
        type=seconds(minimum=0.0),
        default=15.0,
        help="max wait for the peers resync before a reload, and for the table handover "
        "after; /readyz gives readiness this long after a worker started even if its peers "
        "resync never finished",
    )
    run.add_argument(
        "--check-timeout",
        type=seconds(minimum=0.0, inclusive=False),
        default=15.0,
        help="seconds haproxy -c may take",
    )
    run.add_argument(
        "--metrics-port",
        type=port,
        help="serve /metrics, /healthz and /readyz on this port (0 picks one; default off)",
    )
    run.add_argument("--metrics-address", default="127.0.0.1", help="default 127.0.0.1")
    run.add_argument(
        "--readiness-port",
        type=port,
        help="serve only /readyz and /healthz on this port, on --metrics-address: what a load "
        "balancer's health check may reach without reaching /metrics (default off)",
    )
    run.add_argument(
        "--no-deltas",
        dest="deltas",
        action="store_false",
        help="ask for full snapshots only (mixed fleets, or if deltas misbehave)",
    )
    run.add_argument(
        "--report-interval",
        type=seconds(minimum=1.0),
        default=10.0,
        help="seconds between reads of show peers / show table; a report goes to the "
        "control plane after each apply and when a read finds a change (default 10)",
    )
    run.add_argument(
        "--log-format", choices=logformat.LOG_FORMATS, default="text", help="text or json"
    )
    add_transport_arguments(run)


def seconds(minimum: float, inclusive: bool = True) -> Callable[[str], float]:
    """An argparse type for a duration: finite, at most MAX_SECONDS, above `minimum` (or
    equal when `inclusive`). `nan` passed every comparison and hung or NACKed later."""
    bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        low_ok = value >= minimum if inclusive else value > minimum
        if not math.isfinite(value) or not low_ok or value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(
                f"{text!r} seconds: must be finite, {bound} and <= {MAX_SECONDS:g}"
            )
        return value

    parse.__name__ = "seconds"  # argparse names the type in its messages
    return parse


def port(text: str) -> int:
    """An argparse type for a TCP port to listen on: 0 (pick one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} out of range 0-65535")
    return value


def add_transport_arguments(parser: argparse.ArgumentParser) -> None:
    """How the agent reaches the control plane; `transport.check` says which go together."""
    tls = parser.add_argument_group("transport security (one of --ca or --insecure)")
    tls.add_argument("--ca", help="PEM CA bundle that signed the control plane's certificate")
    tls.add_argument("--client-cert", help="PEM client certificate (mTLS)")
    tls.add_argument("--client-key", help="PEM private key of --client-cert")
    tls.add_argument("--server-name", help="TLS name to expect instead of the target's host")
    tls.add_argument(
        "--insecure", action="store_true", help="plaintext gRPC (development, loopback)"
    )
    tls.add_argument(
        "--token-file",
        help=f"bearer token sent on every connection, re-read each time (default "
        f"{DEFAULT_TOKEN_FILE} when it exists; '' for none)",
    )


def add_render_arguments(rend: argparse.ArgumentParser) -> None:
    rend.add_argument("--snapshot", required=True, help="protobuf JSON (grpcurl output), - = stdin")
    rend.add_argument("--pod-name", required=True)
    rend.add_argument("--bind-address", default="0.0.0.0")
    rend.add_argument("--runtime-socket", default="/var/run/haproxy/runtime.sock")
    rend.add_argument(
        "--haproxy-version",
        metavar="X.Y",
        help="render for this HAProxy version (default: ask --haproxy-bin if given, "
        f"else {'.'.join(map(str, version.OLDEST_SUPPORTED))}, the oldest supported)",
    )
    rend.add_argument("--haproxy-bin", help="ask this binary its version (haproxy -v)")
    rend.add_argument(
        "--maps-dir",
        help="write the route map files here, where the printed config names them, so "
        "`haproxy -c` can read them (default: named under /etc/haproxy/maps, not written)",
    )
    rend.add_argument(
        "--certs-dir",
        help="write the HTTPS listeners' crt-lists and the certificates that hold PEM here "
        "(mode 0600), where the printed config names them (default: named under "
        "/etc/haproxy/certs, not written; GetSnapshot answers hold no PEM)",
    )
