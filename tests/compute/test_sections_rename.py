"""Rules renamed to the spare sections their backends run in, again after a route change
(`final_assembly.in_sections_again`): only the rules between the common prefix and suffix
of a listener's rules and its last ones are renamed, and the result equals renaming all
of them (`in_sections`), over random sequences of route changes under the same claims."""

from __future__ import annotations

import dataclasses
import random

import pytest

from controlplane.compute.final_assembly import _RenamedRules, in_sections, in_sections_again
from controlplane.snapshot import HttpListener, RoutePath, RouteRule, WeightedBackend

BACKENDS = ("default_shop_http", "default_cart_http", "default_new_http", "default_db_http")
SECTIONS = {"default_new_http": "spare.3", "default_cart_http": "spare.1"}


def rule(serial: int, rng: random.Random) -> RouteRule:
    backends = tuple(
        WeightedBackend(rng.choice(BACKENDS), rng.randint(1, 3)) for _ in range(rng.randint(1, 2))
    )
    return RouteRule(
        f"r{serial}", (f"h{serial % 7}.example",), RoutePath("Exact", "/"), backends=backends
    )


def changed(rules: list[RouteRule], rng: random.Random, serial: list[int]) -> list[RouteRule]:
    out = list(rules)
    for _ in range(rng.randint(1, 3)):
        serial[0] += 1
        roll = rng.random()
        if roll < 0.3 and out:
            del out[rng.randrange(len(out))]
        elif roll < 0.6 and out:
            out[rng.randrange(len(out))] = rule(serial[0], rng)
        else:
            out.insert(rng.randint(0, len(out)), rule(serial[0], rng))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_renaming_a_route_change_alone_equals_renaming_every_rule(seed: int) -> None:
    rng = random.Random(seed)
    serial = [0]
    rules = [rule(i, rng) for i in range(40)]
    serial[0] = 40
    listeners = (HttpListener(80, tuple(rules), "default_new_http"), HttpListener(81, ()))
    renamed: _RenamedRules = {}
    out = in_sections(listeners, SECTIONS, None, renamed)
    for _ in range(40):
        rules = changed(rules, rng, serial)
        before, before_out = listeners, out
        listeners = (HttpListener(80, tuple(rules), "default_new_http"), HttpListener(81, ()))
        out = in_sections_again(before, before_out, listeners, SECTIONS, renamed)
        fresh_renamed: _RenamedRules = {}
        assert out == in_sections(listeners, SECTIONS, None, fresh_renamed)
        assert renamed.keys() == fresh_renamed.keys()  # nothing stale kept alive
        names = {b.backend for li in out for r in li.rules for b in r.backends}
        assert not names & SECTIONS.keys()


def test_an_unchanged_rule_keeps_its_renamed_object() -> None:
    rng = random.Random(7)
    rules = tuple(rule(i, rng) for i in range(30))
    listeners = (HttpListener(80, rules),)
    renamed: _RenamedRules = {}
    out = in_sections(listeners, SECTIONS, None, renamed)
    moved = (*rules[:10], dataclasses.replace(rules[10], source="moved"), *rules[11:])
    again = in_sections_again(listeners, out, (HttpListener(80, moved),), SECTIONS, renamed)
    kept = [i for i in range(30) if i != 10]
    assert all(again[0].rules[i] is out[0].rules[i] for i in kept)
