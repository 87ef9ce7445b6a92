"""Command-line flags that mean the same for `controlplane compute` and `serve`."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from controlplane.compute.values import is_dns_label
from controlplane.compute.workloads import (
    DEFAULT_MAX_WORKLOADS,
    DEFAULT_WORKLOAD_KINDS,
    WorkloadScope,
)
from controlplane.model import DEFAULT_HAPROXY_SELECTOR, DEFAULT_SETTINGS_CONFIGMAP, ObjectRef

_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")


def object_ref(text: str) -> ObjectRef:
    """argparse type for NAMESPACE/NAME."""
    try:
        return ObjectRef.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _names(text: str, check: re.Pattern[str] | None, what: str) -> frozenset[str]:
    names = frozenset(item.strip() for item in text.split(",") if item.strip())
    bad = sorted(n for n in names if not (check.fullmatch(n) if check else is_dns_label(n)))
    if not names or bad:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}, got {text!r}")
    return names


def namespaces(text: str) -> frozenset[str]:
    """argparse type for NS[,NS...]."""
    return _names(text, None, "namespaces")


def kinds(text: str) -> frozenset[str]:
    """argparse type for KIND[,KIND...] (Kubernetes kinds: DaemonSet, Deployment, ...)."""
    return _names(text, _KIND, "kinds such as DaemonSet,Deployment")


def positive_int(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {text!r}")
    return int(text)


def workload_scope(args: argparse.Namespace) -> WorkloadScope:
    """Which HAProxy pods may form workloads, from the flags below."""
    return WorkloadScope(args.workload_namespaces, args.workload_kinds, args.max_workloads)


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
    default_kinds = ",".join(sorted(DEFAULT_WORKLOAD_KINDS))
    parser.add_argument(
        "--workload-namespaces",
        type=namespaces,
        help="NS[,NS...]: only HAProxy pods in these namespaces form workloads; others are "
        "refused and reported (default: any namespace)",
    )
    parser.add_argument(
        "--workload-kinds",
        type=kinds,
        default=DEFAULT_WORKLOAD_KINDS,
        help="KIND[,KIND...]: top-owner kinds a HAProxy workload may be (a Deployment's pods "
        f"count as Deployment, a bare pod as Pod) (default {default_kinds})",
    )
    parser.add_argument(
        "--max-workloads",
        type=positive_int,
        default=DEFAULT_MAX_WORKLOADS,
        help="most HAProxy workloads served; the ones past it by namespace/Kind/name are "
        f"refused and reported (default {DEFAULT_MAX_WORKLOADS})",
    )
    parser.add_argument(
        "--state",
        type=Path,
        help="slot assignment state file, read before computing and written after; "
        "without it (files mode) slots are kept in memory only",
    )
