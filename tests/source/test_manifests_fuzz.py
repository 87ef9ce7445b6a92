"""Hostile manifests, fuzzed: the converters and the YAML loader only ever answer with a
model object or their own error, whatever shape the input has.

The converters get valid Kubernetes objects with any node replaced by anything (wrong
types at every level, deep nesting, huge strings and integers) and arbitrary JSON shapes.
The folder loader gets YAML texts built to hurt: alias fan-outs (billion laughs), cycles,
deep flow and block nesting, and valid manifests with random YAML punctuation spliced in.
What it accepts must stay within the documented limits (aliases add at most
MAX_ALIAS_NODES nodes), measured on the loaded objects themselves, and memory stays bounded.
"""

from __future__ import annotations

import copy
import datetime
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controlplane.model import ObjectRef
from controlplane.source.convert import ManifestError, service_from
from controlplane.source.files import load_manifests
from controlplane.source.kinds import BY_KIND, INPUT_KINDS
from controlplane.source.yamlload import MAX_ALIAS_NODES, MAX_DEPTH, LoadError, load_text

SETTINGS = ObjectRef("haproxy-system", "haproxy-settings")
FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# A valid object of every input kind (controlplane/source/kinds.py), mutated below.
TEMPLATES: dict[str, dict[str, Any]] = {
    "Service": {
        "kind": "Service",
        "metadata": {
            "name": "shop",
            "namespace": "default",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "annotations": {"haproxy.org/expose": "true", "haproxy.org/tcp-port": 5432},
        },
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
    },
    "EndpointSlice": {
        "kind": "EndpointSlice",
        "metadata": {"name": "shop-1", "labels": {"kubernetes.io/service-name": "shop"}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": ["10.0.0.1"],
                "conditions": {"ready": True, "terminating": False},
                "targetRef": {"kind": "Pod", "name": "shop-0"},
            }
        ],
    },
    "Pod": {
        "kind": "Pod",
        "metadata": {
            "name": "haproxy-a",
            "namespace": "haproxy-system",
            "labels": {"app.kubernetes.io/component": "haproxy"},
            "ownerReferences": [{"kind": "DaemonSet", "name": "haproxy", "controller": True}],
        },
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Running", "podIP": "127.0.1.1"},
    },
    "ReplicaSet": {
        "kind": "ReplicaSet",
        "metadata": {
            "name": "haproxy-7d9f",
            "namespace": "haproxy-system",
            "ownerReferences": [{"kind": "Deployment", "name": "haproxy", "controller": True}],
        },
    },
    "ConfigMap": {
        "kind": "ConfigMap",
        "metadata": {"name": "haproxy-settings", "namespace": "haproxy-system"},
        "data": {"load-balance": "source", "server-slots": 8},
    },
    # The route model's kinds (controlplane/source/convert_gateway.py, convert_routes.py,
    # convert_ingress.py, convert_secret.py).
    "GatewayClass": {
        "kind": "GatewayClass",
        "metadata": {"name": "peerplane", "generation": 1},
        "spec": {"controllerName": "peerplane.dev/gateway-controller"},
    },
    "Gateway": {
        "kind": "Gateway",
        "metadata": {"name": "web", "namespace": "infra", "generation": 2},
        "spec": {
            "gatewayClassName": "peerplane",
            "listeners": [
                {
                    "name": "http",
                    "port": 80,
                    "protocol": "HTTP",
                    "hostname": "*.example.com",
                    "allowedRoutes": {
                        "namespaces": {
                            "from": "Selector",
                            "selector": {
                                "matchLabels": {"team": "shop"},
                                "matchExpressions": [
                                    {"key": "env", "operator": "In", "values": ["prod"]}
                                ],
                            },
                        },
                        "kinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                    },
                },
                {
                    "name": "https",
                    "port": 443,
                    "protocol": "HTTPS",
                    "tls": {
                        "mode": "Terminate",
                        "certificateRefs": [
                            {"group": "", "kind": "Secret", "name": "web", "namespace": "a"}
                        ],
                    },
                },
            ],
            "addresses": [{"type": "IPAddress", "value": "10.0.0.9"}],
        },
    },
    "HTTPRoute": {
        "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "shop", "annotations": {"a": "b"}},
        "spec": {
            "parentRefs": [{"name": "web", "namespace": "infra", "port": 80}],
            "hostnames": ["shop.example.com"],
            "rules": [
                {
                    "matches": [
                        {
                            "path": {"type": "PathPrefix", "value": "/cart"},
                            "headers": [{"name": "x-canary", "value": "1"}],
                            "queryParams": [{"name": "v", "value": "2"}],
                            "method": "GET",
                        }
                    ],
                    "filters": [
                        {
                            "type": "RequestHeaderModifier",
                            "requestHeaderModifier": {
                                "set": [{"name": "x-a", "value": "1"}],
                                "remove": ["x-b"],
                            },
                        },
                        {
                            "type": "RequestRedirect",
                            "requestRedirect": {
                                "scheme": "https",
                                "port": 443,
                                "statusCode": 301,
                                "path": {"type": "ReplaceFullPath", "replaceFullPath": "/"},
                            },
                        },
                    ],
                    "backendRefs": [{"name": "cart", "port": 80, "weight": 5}],
                }
            ],
        },
    },
    "GRPCRoute": {
        "kind": "GRPCRoute",
        "metadata": {"name": "rpc", "namespace": "shop"},
        "spec": {
            "parentRefs": [{"name": "web", "namespace": "infra"}],
            "hostnames": ["rpc.example.com"],
            "rules": [
                {
                    "matches": [
                        {
                            "method": {"service": "shop.Cart", "method": "Add"},
                            "headers": [{"name": "x-canary", "value": "1"}],
                        }
                    ],
                    "backendRefs": [{"name": "cart", "port": 9000, "weight": 2}],
                }
            ],
        },
    },
    "ReferenceGrant": {
        "kind": "ReferenceGrant",
        "metadata": {"name": "grant", "namespace": "other"},
        "spec": {
            "from": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "shop"}
            ],
            "to": [{"group": "", "kind": "Service", "name": "cart"}],
        },
    },
    "IngressClass": {
        "kind": "IngressClass",
        "metadata": {
            "name": "peerplane",
            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"},
        },
        "spec": {"controller": "peerplane.dev/ingress-controller"},
    },
    "Ingress": {
        "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {
            "ingressClassName": "peerplane",
            "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}},
            "tls": [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}],
            "rules": [
                {
                    "host": "shop.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/api",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "api", "port": {"name": "http"}}},
                            }
                        ]
                    },
                }
            ],
        },
    },
    "Namespace": {"kind": "Namespace", "metadata": {"name": "shop", "labels": {"team": "shop"}}},
    "TLSRoute": {
        "kind": "TLSRoute",
        "metadata": {"name": "db", "namespace": "data", "generation": 1},
        "spec": {
            "parentRefs": [{"name": "web", "namespace": "infra", "sectionName": "tls"}],
            "hostnames": ["db.example.com"],
            "rules": [{"name": "r", "backendRefs": [{"name": "db", "port": 5432}]}],
        },
    },
    "TCPRoute": {
        "kind": "TCPRoute",
        "metadata": {"name": "pg", "namespace": "data"},
        "spec": {
            "parentRefs": [{"name": "web", "port": 5432}],
            "rules": [{"backendRefs": [{"name": "db", "port": 5432, "weight": 2}]}],
        },
    },
    "SourceIPPersistencePolicy": {
        "kind": "SourceIPPersistencePolicy",
        "metadata": {"name": "sticky", "namespace": "shop", "generation": 2},
        "spec": {
            "targetRefs": [{"group": "", "kind": "Service", "name": "web", "sectionName": "http"}],
            "tableSize": "64k",
            "expire": "10m",
        },
    },
    "Secret": {
        "kind": "Secret",
        "metadata": {"name": "web", "namespace": "a", "resourceVersion": "5"},
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"},
        "stringData": {"tls.key": "key"},
    },
}


def nested(depth: int, leaf: object) -> object:
    """`leaf` inside `depth` lists and maps, built without recursion."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.dates(),
    st.datetimes(),
    st.sampled_from(["", "true", "80", "http", "8080", "a--b", "-x", "\n", "\x00", "é"]),
)
huge = st.one_of(
    st.builds(
        lambda piece, n: piece * n,
        st.sampled_from(["a", "\n", "é", "[", "\x00"]),
        st.integers(10_000, 300_000),
    ),
    st.integers(10**4400, 10**4400 + 10**6),  # past Python's int-to-str digit limit
    st.builds(nested, st.integers(100, 3000), scalars),
)
json_shapes = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(st.text(max_size=8), st.integers(), st.booleans()), children, max_size=4
        ),
    ),
    max_leaves=15,
)
junk = st.one_of(scalars, json_shapes, huge)


def paths(value: object, prefix: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every node's path, down to the templates' depth (junk put in may be far deeper)."""
    found = [prefix]
    if len(prefix) > 6:
        return found
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, (*prefix, index))
    return found


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    """A template with one to three nodes replaced by junk, deleted, or given a junk key."""
    kind = draw(st.sampled_from(sorted(TEMPLATES)))
    document: Any = copy.deepcopy(TEMPLATES[kind])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths(document)))
        if not path:
            if draw(st.integers(0, 9)) == 0:
                document = draw(junk)
            continue
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(junk)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = draw(junk)
        else:
            parent.append(draw(junk))
        if not isinstance(document, (dict, list)):
            break
    return kind, document


def check_conversion(kind: str, document: Any) -> None:
    convert, model = BY_KIND[kind].convert, BY_KIND[kind].model
    try:
        result = convert(document)
    except ManifestError as err:
        message = str(err)
        assert message and len(message) < 400 and "\n" not in message, message
        return
    assert isinstance(result, model)


HUGE_INT = 10**4400  # str() of it raises ValueError
PORT = {"name": "a", "port": 80, "protocol": "T\nCP"}


@FUZZ
@given(mutated())
@example(("Service", {"metadata": {"name": "x"}, "spec": {"ports": [{"port": HUGE_INT}]}}))
@example(("Service", {"metadata": {"name": "x", "annotations": {"a": HUGE_INT}}}))
@example(("Service", {"metadata": {"name": "x"}, "spec": {"ports": [PORT, {**PORT, "name": "b"}]}}))
@example(("Pod", {"metadata": {"name": "x", "labels": {HUGE_INT: "a"}}}))
def test_converters_answer_a_model_object_or_a_manifest_error(case: tuple[str, Any]) -> None:
    check_conversion(*case)


@FUZZ
@given(st.sampled_from(sorted(TEMPLATES)), junk)
def test_converters_take_any_shape_at_all(kind: str, document: Any) -> None:
    check_conversion(kind, document)


@pytest.mark.parametrize("kind", sorted(TEMPLATES))
def test_unmutated_templates_convert(kind: str) -> None:
    row = BY_KIND[kind]
    assert isinstance(row.convert(TEMPLATES[kind]), row.model)


def test_every_input_kind_has_a_template() -> None:
    """A kind added to the table is fuzzed once it has a template here."""
    assert sorted(TEMPLATES) == sorted(row.kind for row in INPUT_KINDS)


# ------------------------------------------------------------------ the YAML loader


def billion_laughs(levels: int, fanout: int, leaf: str) -> str:
    lines = [f"a0: &a0 {leaf}"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * fanout)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


def deep_flow(depth: int) -> str:
    return (
        "kind: Service\nmetadata: {name: x, annotations: {a: " + "[" * depth + "]" * depth + "}}\n"
    )


def deep_block(depth: int) -> str:
    return (
        "kind: ConfigMap\ndata:\n"
        + "".join("  " * i + "- \n" for i in range(1, depth))
        + "  " * depth
        + "x\n"
    )


def spliced(base: str, pieces: list[tuple[int, str]]) -> str:
    for position, piece in pieces:
        at = position % (len(base) + 1)
        base = base[:at] + piece + base[at:]
    return base


MANIFEST = yaml.safe_dump_all(list(TEMPLATES.values()), sort_keys=False)
PUNCTUATION = st.text(alphabet="[]{}:,&*!|>-#'\"\n\t ?%@`\\a1", min_size=1, max_size=6)
yaml_texts = st.one_of(
    st.builds(
        billion_laughs,
        st.integers(1, 12),
        st.integers(1, 12),
        st.sampled_from(["lol", "[lol]", "{a: b}"]),
    ),
    st.builds(deep_flow, st.integers(1, 3000)),
    st.builds(deep_block, st.integers(1, 400)),
    st.builds(lambda shape: yaml.safe_dump(shape), json_shapes),
    st.builds(
        spliced,
        st.just(MANIFEST),
        st.lists(st.tuples(st.integers(0, 10**6), PUNCTUATION), min_size=1, max_size=5),
    ),
    st.builds(
        lambda a, b: f"x: &{a} [*{a}]\n" if b else f"x: &{a} {{k: *{a}}}\n",
        st.sampled_from(["a", "b1"]),
        st.booleans(),
    ),
    st.text(max_size=200),
)


def expanded_size(value: object, depth: int = 0) -> int:
    """Nodes of a loaded document with every shared part counted at each use (as
    `yamlload` counts aliases), stopping early past the bound."""
    assert depth <= MAX_DEPTH + 1
    if isinstance(value, dict):
        return 1 + sum(
            expanded_size(k, depth + 1) + expanded_size(v, depth + 1) for k, v in value.items()
        )
    if isinstance(value, list):
        return 1 + sum(expanded_size(item, depth + 1) for item in value)
    return 1


@FUZZ
@given(yaml_texts)
def test_yaml_loader_answers_documents_or_a_load_error_within_its_limits(text: str) -> None:
    try:
        documents = load_text(text)
    except LoadError as err:
        assert str(err) and "\n" not in str(err)
        return
    # Without aliases a text has at most about one node per character (`{a,b}` has five);
    # aliases add at most the bound.
    assert sum(expanded_size(d) for d in documents) <= 2 * len(text) + 1 + MAX_ALIAS_NODES


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=yaml_texts)
def test_folder_loader_reports_a_hostile_file_and_keeps_the_others(
    tmp_path: Path, text: str
) -> None:
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "a-good.yaml").write_text(MANIFEST)
    (folder / "b-fuzz.yaml").write_text(text)
    tracemalloc.start()
    try:
        loaded = load_manifests(folder, SETTINGS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024, f"peak {peak} bytes"
    assert [s.name for s in loaded.state.services][:1] == ["shop"]
    assert (
        loaded.state.settings is not None and loaded.state.settings.data["load-balance"] == "source"
    )
    for error in loaded.errors:  # the fuzzed file's, or a duplicate of a good object
        assert error.startswith((f"{folder}/b-fuzz.yaml: ", "duplicate ")), error
        assert "\n" not in error and len(error) < 1000


def test_datetime_scalars_are_kept_as_text() -> None:
    document = copy.deepcopy(TEMPLATES["Service"])
    document["metadata"]["creationTimestamp"] = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert service_from(document).creation_timestamp == "2026-01-01 00:00:00+00:00"
