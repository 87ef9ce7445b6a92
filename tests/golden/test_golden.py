"""Each route feature end to end through the two CLIs, against its expected outputs.

A feature is a folder of tests/golden/ holding `input.yaml` (its routes; the cluster is
tests/golden/cluster.yaml): `controlplane compute` of both gives `snapshot.json`, and
`nodeagent render` of that (HAProxy 2.6, maps under /etc/haproxy/maps) gives `haproxy.cfg`
and `maps/`. PEERPLANE_UPDATE_GOLDEN=1 rewrites the expected outputs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane import cli as controlplane_cli
from nodeagent import cli as nodeagent_cli
from tests.helpers.haproxy_versions import HAProxyBinary

GOLDEN = Path(__file__).resolve().parent
CLUSTER = GOLDEN / "cluster.yaml"
WORKLOAD = "haproxy-system/DaemonSet/haproxy"
POD = "haproxy-a"
MAPS = "/etc/haproxy/maps"  # where the agent's maps are named in the expected config
FEATURES = sorted(p.name for p in GOLDEN.iterdir() if (p / "input.yaml").is_file())


def compute(feature: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """`controlplane compute` of the cluster and the feature's input: the snapshot file."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(CLUSTER, source / CLUSTER.name)
    shutil.copy(GOLDEN / feature / "input.yaml", source / "input.yaml")
    args = ["compute", "--source", f"files:{source}", "--workload", WORKLOAD]
    assert controlplane_cli.main(args) == 0, capsys.readouterr().err
    snapshot = tmp_path / "snapshot.json"
    snapshot.write_text(capsys.readouterr().out)
    return snapshot


def render(
    snapshot: Path, maps: Path, version: list[str], capsys: pytest.CaptureFixture[str]
) -> str:
    """`nodeagent render` of the snapshot, its map files written under `maps`."""
    args = ["render", "--snapshot", str(snapshot), "--pod-name", POD, "--maps-dir", str(maps)]
    assert nodeagent_cli.main([*args, *version]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def outputs(feature: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """Every output of the feature by its path in the feature's folder."""
    snapshot = compute(feature, tmp_path, capsys)
    maps = tmp_path / "maps"
    config = render(snapshot, maps, ["--haproxy-version", "2.6"], capsys)
    found = {"snapshot.json": snapshot.read_text(), "haproxy.cfg": config.replace(str(maps), MAPS)}
    for path in sorted(maps.iterdir()):
        found[f"maps/{path.name}"] = path.read_text()
    return found


def expected(folder: Path) -> dict[str, str]:
    names = ["snapshot.json", "haproxy.cfg"]
    names += sorted(f"maps/{p.name}" for p in (folder / "maps").glob("*.map"))
    return {name: (folder / name).read_text() for name in names if (folder / name).is_file()}


def test_there_are_features() -> None:
    assert len(FEATURES) >= 5, FEATURES


@pytest.mark.parametrize("feature", FEATURES)
def test_feature_gives_its_expected_outputs(
    feature: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = GOLDEN / feature
    found = outputs(feature, tmp_path, capsys)
    if os.environ.get("PEERPLANE_UPDATE_GOLDEN"):
        shutil.rmtree(folder / "maps", ignore_errors=True)
        for name, text in found.items():
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_text(text)
    want = expected(folder)
    assert want, f"no expected outputs in {folder}: run with PEERPLANE_UPDATE_GOLDEN=1"
    assert sorted(found) == sorted(want), "other output files (PEERPLANE_UPDATE_GOLDEN=1)"
    for name, text in found.items():
        assert text == want[name], f"{feature}/{name} differs (PEERPLANE_UPDATE_GOLDEN=1)"


@pytest.mark.integration
@pytest.mark.parametrize("feature", FEATURES)
def test_feature_config_passes_haproxy_check(
    feature: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], haproxy_bin: HAProxyBinary
) -> None:
    """The feature's config, rendered for each installed HAProxy, passes `haproxy -c`."""
    snapshot = compute(feature, tmp_path, capsys)
    maps = tmp_path / "maps"
    config = tmp_path / "haproxy.cfg"
    config.write_text(render(snapshot, maps, ["--haproxy-bin", haproxy_bin.path], capsys))
    check = subprocess.run(
        [haproxy_bin.path, "-c", "-f", str(config)], capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
