"""The plain construction of an anchor-free document gives what SafeConstructor gives:
the same objects of the same types, and the same errors with the same words."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from controlplane.source import yamlload
from tests.bench.scalefolder import service_file

pytestmark = pytest.mark.skipif(not yamlload.C_COMPOSE, reason="needs libyaml >= 0.2.6")

EQUIVALENCE = settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def outcome(text: str) -> str:
    """What loading `text` gives, objects' types included (`repr`: 1, 1.0 and True
    differ, and nan equals itself), or the exception's type and words."""
    try:
        return "ok " + repr(yamlload.load_text(text))
    except Exception as err:  # the reference raises more than LoadError (a KeyError)
        return f"{type(err).__name__}: {err}"


def by_safe_constructor(loader: Any, root: yaml.Node) -> Any:
    """The construction before: SafeConstructor on every node."""
    return loader.construct_document(root)


def reference(text: str) -> str:
    """`outcome` as the loader before gave it."""
    plain = yamlload._construct_tree
    yamlload._construct_tree = by_safe_constructor
    try:
        return outcome(text)
    finally:
        yamlload._construct_tree = plain


# Scalars written as YAML source: plain, quoted, tagged, valid and not (an `!!int x` is a
# ValueError, an `!!bool maybe` a KeyError, `!foo` has no constructor), and the tags and
# keys the plain construction leaves to SafeConstructor (merge, `=`, sets, binary, omap).
SCALARS = [
    "a",
    "'q'",
    '"d\\n"',
    "~",
    "null",
    "Null",
    "",
    "true",
    "False",
    "yes",
    "No",
    "on",
    "0",
    "-0",
    "017",
    "0o17",
    "0x1F",
    "0b101",
    "1_000",
    "+12",
    "190:20:30",
    "-1:30",
    "1e3",
    "6.8523015e+5",
    ".inf",
    "-.Inf",
    ".nan",
    "3.",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10",
    "!!str 5",
    "!!str",
    "!!int 12",
    "!!int x",
    "!!int ''",
    "!!int 0x",
    "!!bool maybe",
    "!!bool yes",
    "!!float .5",
    "!!float x",
    "!!null x",
    "!!timestamp 2001-12-14",
    "!!timestamp x",
    "!!binary aGk=",
    "!!binary '!!'",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!!pairs [a: 1]",
    "!foo bar",
    "!!python/none ''",
    "!!map {a: 1}",
    "!!map x",
    "!!seq [1]",
    "!!seq x",
    "!!str {a: 1}",
    "!!int [1]",
    "!!null {}",
    "{<<: {a: 1}, b: 2}",
    "{<<: [{a: 1}], a: 3}",
    "{<<: 1}",
    "{=: 3, b: 4}",
    "{a: 1, a: 2}",
    "{[a]: 1}",
    "{{b: 1}: 2}",
    "{? [a, b]: 1}",
    "{1: a, 1.0: b, true: c}",
    "[]",
    "{}",
    "[a, [b, {c: d}]]",
    "9" * 5000,
]
KEYS = ["a", "b", "1", "true", "null", "~", "'a'", "<<", "=", "!!int 2", "!!str 3", "1.5"]

leaves = st.sampled_from(SCALARS)
flow = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ", ".join(items) + "]"),
        st.lists(st.tuples(st.sampled_from(KEYS), inner), max_size=4).map(
            lambda pairs: "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
        ),
    ),
    max_leaves=12,
)
documents = st.lists(st.tuples(st.sampled_from(KEYS), flow), min_size=1, max_size=5).map(
    lambda pairs: "".join(f"{k}: {v}\n" for k, v in pairs)
)
texts = st.lists(st.one_of(documents, flow.map(lambda v: v + "\n")), min_size=1, max_size=3)

values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=12),
        st.dates(),
        st.datetimes(),
        st.binary(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=4),
    ),
    max_leaves=20,
)


@example(["a: 1\n", "{<<: {a: 1}, b: 2}\n"])
@example(["a: !!bool maybe\nb: !!int x\n"])
@example(["a: {b: !!int x}\nc: !!bool maybe\n"])  # SafeConstructor's order of errors
@example(["a: [{b: !foo x}]\n"])
@EQUIVALENCE
@given(texts)
def test_written_documents_load_as_safe_constructor_loads_them(parts: list[str]) -> None:
    text = "---\n".join(parts)
    assert "&" not in text  # the plain construction's case
    assert outcome(text) == reference(text)


@EQUIVALENCE
@given(values, st.booleans())
def test_dumped_values_load_as_safe_constructor_loads_them(value: object, block: bool) -> None:
    text = yaml.safe_dump(value, default_flow_style=not block, allow_unicode=True)
    if "&" in text:
        return  # an anchor (or the character in a string): SafeConstructor builds it
    assert outcome(text) == reference(text)


def test_a_service_file_is_built_without_safe_constructor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The benchmark's change file (a Service and its EndpointSlice) takes the plain path
    all the way (it falls back to SafeConstructor on nothing) and loads the same."""
    text = service_file(7)
    expected = reference(text)

    def refuse(*_: object) -> None:
        raise AssertionError("SafeConstructor was asked")

    monkeypatch.setattr(yaml.constructor.SafeConstructor, "construct_document", refuse)
    assert outcome(text) == expected
