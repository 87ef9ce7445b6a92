"""Command-line flags that mean the same for `controlplane compute` and `serve`."""

from __future__ import annotations

import argparse
from pathlib import Path

from controlplane.model import DEFAULT_HAPROXY_SELECTOR, DEFAULT_SETTINGS_CONFIGMAP, ObjectRef


def object_ref(text: str) -> ObjectRef:
    """argparse type for NAMESPACE/NAME."""
    try:
        return ObjectRef.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--configmap",
        type=object_ref,
        default=ObjectRef.parse(DEFAULT_SETTINGS_CONFIGMAP),
        help=f"settings ConfigMap NAMESPACE/NAME (default {DEFAULT_SETTINGS_CONFIGMAP})",
    )
    parser.add_argument(
        "--haproxy-selector",
        default=DEFAULT_HAPROXY_SELECTOR,
        help=f"label selector of the HAProxy pods (default {DEFAULT_HAPROXY_SELECTOR})",
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="slot assignment state file, read before computing and written after; "
        "without it (files mode) slots are kept in memory only",
    )
