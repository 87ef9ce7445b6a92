"""Real Helm for the chart's tests: the binary `tests/helm/build` makes from the pinned
helm.sh/helm/v4 module, run on deploy/chart/peerplane, and the objects it renders.

`Helm` runs `helm lint`, `helm template` and `helm install`/`upgrade`/`uninstall` with an
isolated configuration (its own HELM_CACHE_HOME, HELM_CONFIG_HOME and HELM_DATA_HOME, no
repositories, no plugins), so what a developer configured never changes a result.
`normalised` is what the chart's render and `kubectl kustomize deploy/` are compared on.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "chart" / "peerplane"
HELM_BUILD = ROOT / "tests" / "helm" / "build"
CLUSTER_BUILD = ROOT / "tests" / "cluster" / "build"
Obj = dict[str, Any]
# The labels Helm's conventions add to every object's metadata (not to selectors or pod
# templates): bookkeeping of the release, which the kustomize base has no notion of.
HELM_LABELS = (
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)


@functools.cache
def helm_binary() -> Path:
    """tests/helm/build's binary (built on the first call of a machine, minutes; cached)."""
    done = subprocess.run(
        [str(HELM_BUILD)], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(done.stdout.strip().splitlines()[-1])


@functools.cache
def kubectl_binary() -> Path:
    """kubectl from PATH, else the one tests/cluster/build makes (for `kubectl kustomize`)."""
    found = shutil.which("kubectl")
    if found:
        return Path(found)
    done = subprocess.run(
        [str(CLUSTER_BUILD)], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(done.stdout.strip().splitlines()[-1]) / "kubectl"


@dataclass(frozen=True)
class Helm:
    binary: Path
    home: Path  # HELM_*_HOME live under it

    def run(
        self, *args: str, kubeconfig: Path | None = None, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """`helm ARGS`, whatever its exit code."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        return subprocess.run(
            [str(self.binary), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def check(self, *args: str, kubeconfig: Path | None = None, timeout: float = 120.0) -> str:
        """`helm ARGS`; stdout, failing with its stderr."""
        done = self.run(*args, kubeconfig=kubeconfig, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def template(
        self,
        *values: Path,
        release: str = "peerplane",
        namespace: str = "haproxy-system",
        sets: tuple[str, ...] = (),
        include_crds: bool = False,
    ) -> str:
        """`helm template` of the chart with these values files and --set pairs (and the
        chart's crds/ with `include_crds`, as `helm install` applies them)."""
        args = ["template", release, str(CHART), "--namespace", namespace]
        if include_crds:
            args.append("--include-crds")
        for path in values:
            args += ["--values", str(path)]
        for pair in sets:
            args += ["--set", pair]
        return self.check(*args)


def documents(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def identity(obj: Obj) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (
        str(obj.get("apiVersion")),
        str(obj.get("kind")),
        str(meta.get("namespace", "")),
        str(meta.get("name")),
    )


def without_helm_labels(obj: Obj) -> Obj:
    """`obj` with Helm's release labels removed from its metadata (nothing else)."""
    copy: Obj = json.loads(json.dumps(obj))
    labels = (copy.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        for key in HELM_LABELS:
            labels.pop(key, None)
    return copy


def normalised(objs: list[Obj]) -> dict[tuple[str, str, str, str], Obj]:
    """Objects by (apiVersion, kind, namespace, name), without Helm's release labels."""
    return {identity(obj): without_helm_labels(obj) for obj in objs}


def kustomize(folder: Path) -> list[Obj]:
    """`kubectl kustomize FOLDER`'s objects."""
    done = subprocess.run(
        [str(kubectl_binary()), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {folder}: {done.stderr.strip()}")
    return documents(done.stdout)
