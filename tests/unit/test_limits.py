"""o_contracts.limits: what can be recorded, and the path named when something cannot."""

from __future__ import annotations

import json
import re
import time

import pytest

from o_contracts import limits
from o_contracts.ids import derived_id, new_id, parse_id
from o_gateway.openapi import id_pattern


def refused(value: object, **kwargs: object) -> limits.Unstorable:
    with pytest.raises(limits.Unstorable) as caught:
        limits.check_storable(value, "body", **kwargs)  # type: ignore[arg-type]
    return caught.value


def test_storable_values_pass_and_are_sized() -> None:
    value = {"a": [1, -(2**63), 2**63 - 1, 1.5, True, None, "héllo"], "b": {"c": "d"}}
    size = limits.check_storable(value)
    as_json = len(json.dumps(value, ensure_ascii=False).encode())
    assert as_json <= size <= 2 * as_json


def test_nul_names_its_path() -> None:
    exc = refused({"messages": [{"content": "hi\x00"}]})
    assert exc.path == "body.messages[0].content"
    assert "NUL" in str(exc)


def test_nul_in_a_key_is_refused() -> None:
    assert "NUL" in str(refused({"meta": {"k\x00": 1}}))


def test_lone_surrogate_is_refused() -> None:
    exc = refused({"v": "ok \ud800 not"})
    assert exc.path == "body.v" and "surrogate" in str(exc)


def test_valid_astral_characters_pass() -> None:
    limits.check_storable({"v": "emoji 😀 and 漢字"})


@pytest.mark.parametrize("number", [2**63, -(2**63) - 1, 10**40])
def test_integers_beyond_int64_are_refused(number: int) -> None:
    assert "64-bit" in str(refused({"n": number}))


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(number: float) -> None:
    assert "finite" in str(refused([number]))


def test_depth_is_bounded() -> None:
    deep: object = 1
    for _ in range(600):
        deep = {"a": deep}
    exc = refused(deep)
    assert "nested more than 64" in str(exc)
    shallow: object = 1
    for _ in range(limits.MAX_DEPTH):
        shallow = [shallow]
    limits.check_storable(shallow)


def test_text_size_is_counted_in_utf8_bytes() -> None:
    cap = limits.MAX_TEXT_BYTES
    limits.check_storable("x" * cap)
    assert "over the limit" in str(refused("x" * (cap + 1)))
    # A quarter as many characters, four bytes each: over the byte limit.
    assert "bytes as UTF-8" in str(refused("😀" * (cap // 4 + 1)))


def test_max_bytes_bounds_the_whole_value() -> None:
    assert "over the limit of 100" in str(refused({"k": "v" * 200}, max_bytes=100))


def test_objects_that_json_cannot_hold_are_refused() -> None:
    assert "type bytes" in str(refused({"b": b"raw"}))
    assert "not a string" in str(refused({1: "x"}))


def test_a_small_body_is_checked_in_microseconds() -> None:
    body = {"messages": [{"role": "user", "content": "hello there " * 20}], "max_steps": 10}
    runs = 2000
    start = time.perf_counter()
    for _ in range(runs):
        limits.check_storable(body)
    per_check = (time.perf_counter() - start) / runs
    assert per_check < 100e-6, per_check


def test_id_pattern_accepts_what_parse_id_accepts() -> None:
    for prefix in ("agent", "block", "passage"):
        pattern = re.compile(id_pattern(prefix))
        for value in (new_id(prefix), derived_id(prefix, "x", "y")):  # type: ignore[arg-type]
            assert parse_id(value, prefix) == value  # type: ignore[arg-type]
            assert pattern.match(value)
        good = new_id(prefix)  # type: ignore[arg-type]
        for bad in (f"{prefix}-..", f"{prefix}-../x", f"{prefix}-ü", good.upper(), good + "/x"):
            assert not pattern.match(bad), bad
