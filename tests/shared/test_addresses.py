"""The shared address canonicaliser (peerplane.addresses), both ways, with hypothesis."""

from __future__ import annotations

import ipaddress
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peerplane import addresses
from peerplane.addresses import AddressError, canonical_address, format_address, parse_address

ipv4 = st.integers(0, 2**32 - 1).map(lambda n: n.to_bytes(4, "big"))
ipv6 = st.integers(0, 2**128 - 1).map(lambda n: n.to_bytes(16, "big"))
# Runs of zero groups and embedded IPv4 are where spellings differ: draw them often.
groups = st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xA00, 0xFE80]), min_size=8, max_size=8)
ipv6_zeros = groups.map(lambda g: b"".join(x.to_bytes(2, "big") for x in g))
mapped = ipv4.map(lambda b: bytes(10) + b"\xff\xff" + b)
compatible = ipv4.map(lambda b: bytes(12) + b)
packed_addresses = st.one_of(ipv4, ipv6, ipv6_zeros, mapped, compatible)


def spellings(packed: bytes) -> list[str]:
    """Other valid ways to write the same address."""
    ip = ipaddress.ip_address(packed)
    if ip.version == 4:
        return [str(ip)]
    exploded = ip.exploded
    words = exploded.split(":")
    dotted_tail = ":".join(words[:6]) + ":" + str(ipaddress.IPv4Address(packed[12:]))
    unpadded = ":".join(w.lstrip("0") or "0" for w in words)
    return [exploded, exploded.upper(), dotted_tail, unpadded, str(ip), ip.compressed.upper()]


@given(packed_addresses)
def test_parse_of_render_is_the_address(packed: bytes) -> None:
    text = format_address(packed)
    parsed = parse_address(text)
    assert parsed.packed == packed
    assert parsed.version == (4 if len(packed) == 4 else 6)
    assert parsed.text == text


@given(packed_addresses)
def test_every_spelling_gives_one_canonical_text_which_is_a_fixed_point(packed: bytes) -> None:
    canonical = format_address(packed)
    assert canonical_address(canonical) == canonical
    for text in spellings(packed):
        assert canonical_address(text) == canonical, text
        assert parse_address(text).packed == packed


@given(packed_addresses)
def test_canonical_text_is_rfc5952_hex_on_any_python(packed: bytes) -> None:
    """Python's own text where it is version-independent (everything but IPv4-mapped,
    which newer Pythons print dotted, gh-87799); never a dotted IPv4 tail."""
    ip = ipaddress.ip_address(packed)
    text = format_address(packed)
    if ip.version == 6:
        assert "." not in text and text == text.lower()
        if ip.ipv4_mapped is None:
            assert text == ip.compressed
    else:
        assert text == str(ip)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("::10.0.0.1", "::a00:1"),  # IPv4-compatible: glibc inet_ntop prints it dotted
        ("::a00:1", "::a00:1"),
        ("::ffff:10.0.0.1", "::ffff:a00:1"),  # IPv4-mapped: newer Pythons print it dotted
        ("0:0:0:0:0:FFFF:0A00:0001", "::ffff:a00:1"),
        ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),  # the longest zero run
        ("1:0:0:1:1:0:0:1", "1::1:1:0:0:1"),  # the first of two equal runs
        ("1:0:1:1:1:1:1:1", "1:0:1:1:1:1:1:1"),  # one zero group is not compressed
        ("::", "::"),
        ("0.0.0.0", "0.0.0.0"),
        ("127.0.1.11", "127.0.1.11"),
    ],
)
def test_canonical_examples(text: str, canonical: str) -> None:
    assert canonical_address(text) == canonical


ZONE_OR_JUNK = st.text(min_size=0, max_size=20)


@given(packed_addresses.filter(lambda p: len(p) == 16), ZONE_OR_JUNK)
def test_any_zone_suffix_is_rejected(packed: bytes, zone: str) -> None:
    with pytest.raises(AddressError, match="zone"):
        canonical_address(f"{format_address(packed)}%{zone}")


SPACE_OR_CONTROL = st.sampled_from(
    [" ", "\t", "\n", "\r", "\v", "\f", "\x00", "\x1b", "\x7f", "\x85", "\xa0", "\u2028"]
)


@given(packed_addresses, SPACE_OR_CONTROL, st.integers(0, 45))
def test_whitespace_or_control_anywhere_is_rejected(packed: bytes, bad: str, at: int) -> None:
    text = format_address(packed)
    at = min(at, len(text))
    with pytest.raises(AddressError, match="whitespace or control"):
        canonical_address(text[:at] + bad + text[at:])


@pytest.mark.parametrize(
    "text",
    [
        "fe80::1%x;disable frontend fe_http;clear table default_shop_http",
        "fe80::1%eth0",
        "fe80::1%x\nbackend evil",
        "10.0.0.1%eth0",
    ],
)
def test_zone_and_injection_examples_are_rejected(text: str) -> None:
    with pytest.raises(AddressError, match="zone suffix not allowed"):
        canonical_address(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "010.0.0.1",  # leading zero: octal to some parsers
        "1.2.3",
        "256.0.0.1",
        "[::1]",
        "::1/128",
        "10.0.0.1:80",
        "1:2:3:4:5:6:7:8:9",
        "::g",
        "localhost",
        "\uff11.\uff12.\uff13.\uff14",  # fullwidth digits: int() would take them
        "0" * 100,
    ],
)
def test_anything_else_is_rejected_with_a_bounded_message(text: str) -> None:
    with pytest.raises(AddressError) as err:
        canonical_address(text)
    assert len(str(err.value)) < 160


@pytest.mark.parametrize("value", [None, b"10.0.0.1", 167772161])
def test_only_text_is_an_address(value: object) -> None:
    with pytest.raises(AddressError, match="text"):
        canonical_address(value)


@given(st.text(max_size=50))
def test_arbitrary_text_is_either_rejected_or_a_canonical_address(text: str) -> None:
    try:
        parsed = parse_address(text)
    except AddressError:
        return
    assert canonical_address(parsed.text) == parsed.text
    assert ipaddress.ip_address(text).packed == parsed.packed


@given(ipv4)
def test_canonical_ipv4_is_parsed_without_ipaddress(packed: bytes) -> None:
    """The common case, an endpoint as Kubernetes writes it, takes the fast path: an
    agent's render parses 160,000 of them at 8,000 Services (issue 33, item 4)."""
    text = format_address(packed)
    addresses._parse.cache_clear()
    with mock.patch.object(addresses.ipaddress, "IPv4Address", side_effect=AssertionError):
        parsed = parse_address(text)
    assert (parsed.version, parsed.packed, parsed.text) == (4, packed, text)


@given(st.lists(st.integers(0, 999), min_size=4, max_size=4), st.lists(st.booleans(), min_size=4))
def test_the_fast_path_accepts_exactly_what_ipaddress_accepts(
    octets: list[int], padded: list[bool]
) -> None:
    """Leading zeros and octets past 255 still go the strict way, and are refused."""
    text = ".".join(f"0{o}" if pad else str(o) for o, pad in zip(octets, padded, strict=False))
    try:
        expected: bytes | None = ipaddress.IPv4Address(text).packed
    except ValueError:
        expected = None
    addresses._parse.cache_clear()
    if expected is None:
        with pytest.raises(AddressError):
            parse_address(text)
    else:
        assert parse_address(text).packed == expected
        assert parse_address(text).text == text
