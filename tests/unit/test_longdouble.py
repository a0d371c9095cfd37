"""INCRBYFLOAT's long double arithmetic (kvd/commands/longdouble.py) on values whose digits were read from
redis-server 7.0.15 (``SET f a`` then ``INCRBYFLOAT f b``). The differential test compares many more."""

from __future__ import annotations

import pytest

from kvd.commands import longdouble

CASES = [
    (b"10.5", b"0.1", b"10.6"),
    (b"0.1", b"0.2", b"0.3"),  # a double would print 0.30000000000000004
    (b"5.0e3", b"2.0e2", b"5200"),
    (b"123456789012345678901234567890", b"1", b"123456789012345678899921813504"),  # 64 bits of significand
    (b"0", b"1e-20", b"0"),  # below 17 decimals
    (b"-1e-18", b"0", b"0"),  # "-0" prints as 0
    (b"0x1p3", b"1", b"9"),  # strtold's hexadecimal form
    (b"1.", b".5", b"1.5"),
]


@pytest.mark.parametrize(("stored", "increment", "expected"), CASES)
def test_sums_print_as_redis_prints_them(stored, increment, expected):
    total = longdouble.add(longdouble.parse(stored), longdouble.parse(increment))
    assert longdouble.format_human(total) == expected


@pytest.mark.parametrize(
    "text",
    [b"", b" 1", b"1 ", b"abc", b"nan", b"nan(1)", b"1e", b"e5", b".", b"0x", b"1_0", b"1e4933", b"1e-4952",
     b"1e999999999", b"1" * 5000],
)  # fmt: skip
def test_what_redis_calls_not_a_valid_float(text):
    assert longdouble.parse(text) is None


def test_range_ends_and_infinities():
    assert longdouble.parse(b"0" * 5118 + b"1") == 1  # just under MAX_LONG_DOUBLE_CHARS
    assert longdouble.parse(b"0" * 5119 + b"1") is None  # at it
    assert longdouble.parse(b"3e-4951") > 0  # a subnormal is a number
    assert longdouble.parse(b"1.18973149535723176502e4932") is not None  # the largest long double
    assert longdouble.parse(b"1.18973149535723176503e4932") is not None  # rounds down to it
    assert longdouble.parse(b"1.2e4932") is None  # past it: ERANGE
    inf, big = longdouble.parse(b"inf"), longdouble.parse(b"1e4932")
    assert longdouble.add(inf, big) == inf
    assert longdouble.add(inf, longdouble.parse(b"-Infinity")) is None  # NaN
    assert longdouble.add(big, big) == inf  # the sum overflows
    assert longdouble.parse(b"0e99999") == 0
    # exponents past any long double, and past CPython's 4300-digit limit on int(): no exception
    assert longdouble.parse(b"1e" + b"9" * 400) is None and longdouble.parse(b"1e-" + b"9" * 400) is None
    assert longdouble.format_human(longdouble.parse(b"1e" + b"0" * 5000 + b"1")) == b"10"  # Redis: 10
