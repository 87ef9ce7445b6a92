"""The committed generated modules are exactly what `make proto` writes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GENERATED = ("peerplane_pb2.py", "peerplane_pb2.pyi", "peerplane_pb2_grpc.py")


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    shutil.copytree(REPO / "proto", tmp_path / "proto", ignore=shutil.ignore_patterns("*_pb2*"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iproto",
            "--python_out=proto",
            "--pyi_out=proto",
            "--grpc_python_out=proto",
            "proto/peerplane/v1/peerplane.proto",
        ],
        cwd=tmp_path,
        check=True,
        timeout=60,
    )
    for name in GENERATED:
        fresh = (tmp_path / "proto/peerplane/v1" / name).read_text()
        committed = (REPO / "proto/peerplane/v1" / name).read_text()
        assert fresh == committed, f"{name} is stale: run `make proto` and commit"
