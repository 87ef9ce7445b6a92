"""The settings table is the one definition of every setting (docs/design.md, "Settings:
one table"): the resolver reads it, and the annotation reference and the deploy ConfigMap
are checked against it here, never against literals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.model import ConfigMap, Service
from controlplane.settings.resolver import (
    BackendSettings,
    CheckSettings,
    GlobalSettings,
    Resolver,
    lookup,
)
from controlplane.settings.table import BY_KEY, SETTINGS, Setting
from controlplane.settings.values import Invalid
from controlplane.snapshot import RejectedInput

ROOT = Path(__file__).resolve().parents[2]
ANNOTATIONS = (ROOT / "docs" / "annotations.md").read_text()
SETTINGS_YAML = ROOT / "deploy" / "base" / "settings.yaml"


def _section(heading: str) -> str:
    """The text of `## heading` up to the next `## `."""
    start = ANNOTATIONS.index(f"## {heading}\n")
    end = ANNOTATIONS.find("\n## ", start + 1)
    return ANNOTATIONS[start : end if end >= 0 else None]


def _table(heading: str, key_pattern: str) -> dict[str, list[str]]:
    """{key: the row's other cells} of the table under `heading`."""
    rows: dict[str, list[str]] = {}
    for line in _section(heading).splitlines():
        match = re.fullmatch(rf"\| `{key_pattern}` \|(.*)\|", line)
        if match:
            rows[match[1]] = [cell.strip() for cell in match[2].split(" | ")]
    return rows


SERVICE_TABLE = _table("Service annotations", r"haproxy\.org/([a-z-]+)")  # values, default, meaning
CONFIGMAP_TABLE = _table("Settings ConfigMap keys", r"([a-z-]+)")  # default, meaning


def test_keys_are_unique_and_every_row_has_a_one_line_doc() -> None:
    assert len(BY_KEY) == len(SETTINGS)
    for row in SETTINGS:
        assert re.fullmatch(r"[a-z][a-z-]*[a-z]", row.key), row.key
        assert row.doc and "\n" not in row.doc, row.key


def test_every_annotation_row_is_documented_with_its_default_and_no_other_key_is() -> None:
    annotations = {row.key: row for row in SETTINGS if row.on_service}
    assert set(SERVICE_TABLE) == set(annotations)
    for key, (_values, default, meaning) in SERVICE_TABLE.items():
        row = annotations[key]
        assert default.startswith(row.default_doc), key
        assert meaning.startswith(row.doc), key


def test_every_configmap_only_row_is_documented_and_the_backend_wide_list_is_the_both_rows() -> (
    None
):
    configmap_only = {row.key: row for row in SETTINGS if row.scope == "ConfigMap"}
    assert set(CONFIGMAP_TABLE) == set(configmap_only)
    for key, (default, meaning) in CONFIGMAP_TABLE.items():
        assert default.startswith(configmap_only[key].default_doc), key
        assert meaning.startswith(configmap_only[key].doc), key
    listed = re.search(
        r"All backend-wide keys above \(([^)]*)\)", _section("Settings ConfigMap keys")
    )
    assert listed is not None
    documented = [key.strip(" `\n") for key in listed[1].split(",")]
    assert documented == [row.key for row in SETTINGS if row.scope == "both"]


@pytest.mark.parametrize("row", SETTINGS, ids=lambda row: row.key)
def test_the_documented_default_is_the_default(row: Setting[Any]) -> None:
    """A default written as a value parses back to the row's default; one written in words
    ("none", "every workload", "HAProxy's") is an unset default."""
    value = re.fullmatch(r"`([^`]+)`", row.default_doc)
    if value is None:
        assert row.default in (None, ""), row.key
    else:
        assert row.parse(value[1], "http") == row.default


def _configmap_data() -> dict[str, str]:
    manifest = yaml.safe_load(SETTINGS_YAML.read_text())
    assert manifest["kind"] == "ConfigMap"
    data = manifest["data"]
    assert isinstance(data, dict)
    return {str(k): str(v) for k, v in data.items()}


def test_every_key_of_the_deploy_configmap_is_a_configmap_row_with_a_value_its_parser_accepts() -> (
    None
):
    data = _configmap_data()
    assert data
    for key, value in data.items():
        row = BY_KEY.get(key)
        assert row is not None and row.in_configmap, key
        for mode in ("http", "tcp") if row.scope == "both" else ("http",):
            row.parse(value, mode)  # raises Invalid when the deploy value is refused


def test_the_deploy_configmap_shows_every_configmap_row_set_or_as_a_commented_example() -> None:
    text = SETTINGS_YAML.read_text()
    commented = set(re.findall(r"^\s*# ([a-z-]+): \S", text, re.MULTILINE))
    shown = set(_configmap_data()) | commented
    assert {row.key for row in SETTINGS if row.in_configmap} <= shown
    for key in commented & set(BY_KEY):
        example = re.search(rf"^\s*# {key}: (\S+)$", text, re.MULTILINE)
        assert example is not None
        BY_KEY[key].parse(example[1], "http")


def test_a_key_outside_the_table_is_a_programming_error() -> None:
    with pytest.raises(KeyError, match="not in the settings table"):
        lookup({"haproxy.org/expire": "1m"}, "expire")
    assert lookup({"haproxy.org/expose": "true", "expose": "x"}, "expose") is not None


def _service(**annotations: str) -> Service:
    return Service(
        namespace="default",
        name="shop",
        annotations={f"haproxy.org/{k}": v for k, v in annotations.items()},
        ports=(),
    )


def test_with_nothing_set_the_resolver_returns_the_table_defaults() -> None:
    rejections: list[RejectedInput] = []
    resolver = Resolver(None)
    defaults = {row.key: row.default for row in SETTINGS}
    assert resolver.backend(_service(), "http", rejections) == BackendSettings(
        balance=defaults["load-balance"],
        hash_type=defaults["hash-type"],
        persistence=defaults["source-ip-persistence"],
        table_size=defaults["source-ip-persistence-size"],
        expire_ms=defaults["source-ip-persistence-expire"],
        server_slots=defaults["server-slots"],
        check=CheckSettings(
            interval_ms=defaults["check-interval"],
            rise=defaults["check-rise"],
            fall=defaults["check-fall"],
            http_path=defaults["check-http"],
        ),
    )
    assert resolver.global_settings(rejections) == GlobalSettings(
        http_port=defaults["http-port"],
        peer_port=defaults["peer-port"],
        https_port=defaults["https-port"],
        accept_proxy=defaults["accept-proxy-protocol"],
    )
    assert rejections == []


@pytest.mark.parametrize(
    "row", [row for row in SETTINGS if row.scope == "both"], ids=lambda row: row.key
)
def test_every_backend_wide_row_is_read_from_the_service_then_the_configmap(
    row: Setting[Any],
) -> None:
    """Each row the resolver reads: a bad annotation falls back to the ConfigMap's value,
    a bad ConfigMap value to the default, each reported under the row's key."""
    configmap = ConfigMap(namespace="haproxy-system", name="haproxy-settings", data={})
    bad = "\x00bad"
    with pytest.raises(Invalid):
        row.parse(bad, "http")
    rejections: list[RejectedInput] = []
    Resolver(configmap).backend(_service(**{row.key: bad}), "http", rejections)
    assert [(r.kind, r.key) for r in rejections] == [("Service", f"haproxy.org/{row.key}")]
    rejections = []
    bad_configmap = ConfigMap(configmap.namespace, configmap.name, {row.key: bad})
    Resolver(bad_configmap).backend(_service(), "http", rejections)
    assert [(r.kind, r.key) for r in rejections] == [("ConfigMap", row.key)]


def test_the_https_port_may_not_take_the_http_or_peer_port() -> None:
    def settings(**data: str) -> tuple[GlobalSettings, list[RejectedInput]]:
        rejections: list[RejectedInput] = []
        configmap = ConfigMap(namespace="haproxy-system", name="haproxy-settings", data=data)
        return Resolver(configmap).global_settings(rejections), rejections

    found, rejections = settings(**{"https-port": "8443", "accept-proxy-protocol": "true"})
    assert (found.https_port, found.accept_proxy, rejections) == (8443, True, [])
    found, rejections = settings(**{"https-port": "80"})
    assert found.https_port == 443
    assert [r.reason for r in rejections] == ["port 80 is the HTTP port"]
    found, rejections = settings(**{"https-port": "10000"})
    assert found.https_port == 443
    assert [r.reason for r in rejections] == ["port 10000 is the peer port"]
    found, rejections = settings(**{"http-port": "443"})  # the default collides: none
    assert (found.http_port, found.https_port, rejections) == (443, 0, [])


def test_global_settings_are_computed_once_per_configmap_their_rejections_replayed() -> None:
    """Every computation asks twice; parsing and checking every value cost ~2.5 ms of a
    route change at 10,000 routes. The same ConfigMap object gives the same answer and the
    same rejections each time, without parsing again; another ConfigMap is read anew."""
    configmap = ConfigMap("haproxy-system", "haproxy-settings", data={"https-port": "80"})
    first: list[RejectedInput] = []
    found = Resolver(configmap).global_settings(first)
    again: list[RejectedInput] = []
    assert Resolver(configmap).global_settings(again) is found
    assert again == first and [r.reason for r in first] == ["port 80 is the HTTP port"]
    other = ConfigMap("haproxy-system", "haproxy-settings", data={"https-port": "8443"})
    none: list[RejectedInput] = []
    assert Resolver(other).global_settings(none).https_port == 8443 and none == []
