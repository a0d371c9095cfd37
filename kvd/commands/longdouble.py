"""INCRBYFLOAT's arithmetic, exactly as Redis does it in C's ``long double`` on x86-64.

Redis parses both numbers with ``strtold``, adds them in the x87 80-bit format (a 64-bit significand, so
0.1 + 0.2 is 0.3 there and 0.30000000000000004 in a double) and prints the sum with ``"%.17Lf"`` with the
trailing zeros cut (``ld2string``'s human mode). A Python float would give different digits, so the three
steps are done here with exact rationals (``fractions.Fraction``) and the rounding the hardware and glibc use:

* a parsed or summed value is rounded to the nearest value with a 64-bit significand, ties to even, with the
  format's exponent range (subnormals below 2**-16382, infinity from 2**16384);
* printing rounds the exact binary value to 17 decimals, ties to even (glibc's ``printf``).

Speed does not matter here (an INCRBYFLOAT is rare next to a KV chunk); exactness does, and the differential
test against redis-server (``tests/compat/test_differential.py``) checks the digits.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

INF = float("inf")
Number = Fraction | float  # a finite value, or +-INF

_SIGNIFICAND_BITS = 64
_MIN_NORMAL_EXP = -16382  # 2**-16382 is the smallest normal value
_OVERFLOW = Fraction(2) ** 16384
_MAX_TEXT = 5 * 1024  # Redis's MAX_LONG_DOUBLE_CHARS: longer input is refused before strtold
_C_SPACE = b" \t\n\v\f\r"

_DECIMAL = re.compile(rb"([+-]?)(?:([0-9]+)(?:\.([0-9]*))?|\.([0-9]+))(?:[eE]([+-]?[0-9]+))?")
_HEX = re.compile(rb"([+-]?)0[xX](?:([0-9a-fA-F]+)(?:\.([0-9a-fA-F]*))?|\.([0-9a-fA-F]+))(?:[pP]([+-]?[0-9]+))?")
_INFINITY = re.compile(rb"([+-]?)(?:inf|infinity)", re.IGNORECASE)


def parse(text: bytes) -> Number | None:
    """Redis's ``string2ld``: the value, or None where Redis says "value is not a valid float" (empty, too long,
    a leading space, trailing bytes, NaN, or a finite number out of the format's range)."""
    if not text or len(text) >= _MAX_TEXT or text[0] in _C_SPACE:
        return None
    if m := _INFINITY.fullmatch(text):
        return -INF if m[1] == b"-" else INF
    if m := _DECIMAL.fullmatch(text):
        base = 10
    elif m := _HEX.fullmatch(text):
        base = 16
    else:
        return None  # NaN included: strtold takes it, Redis refuses it
    whole, frac = (m[2], m[3] or b"") if m[2] is not None else (b"", m[4])
    mantissa = _to_int(whole + frac or b"0", base)
    if mantissa == 0:
        return Fraction(0)
    # The value is mantissa * radix**power; its binary magnitude decides overflow and underflow before the
    # exact rational is built, so "1e999999999" costs nothing.
    radix = 10 if base == 10 else 2
    exponent = _exponent(m[5] or b"0")
    if exponent is None:  # beyond any long double either way: overflow, or underflow to zero
        return None
    power = exponent - len(frac) * (1 if base == 10 else 4)
    magnitude_bits = mantissa.bit_length() + power * math.log2(radix)  # log2 of the value, at most 1 over
    if magnitude_bits > 16384 + 8 or magnitude_bits < -16445 - 8:
        return None  # strtold's ERANGE: overflow to HUGE_VALL, or underflow to zero
    exact = mantissa * Fraction(radix) ** power
    value = _round(-exact if m[1] == b"-" else exact)
    if value in (INF, -INF) or (value == 0 and exact != 0):
        return None  # strtold's ERANGE: overflow to HUGE_VALL, or a nonzero number that underflows to zero
    return value


def add(a: Number, b: Number) -> Number | None:
    """``a + b`` rounded as the x87 unit rounds it; None for NaN (inf - inf)."""
    if isinstance(a, float) and isinstance(b, float):  # two infinities
        return a if a == b else None
    if isinstance(a, float) or isinstance(b, float):  # one infinity: the finite side cannot change it
        return a if isinstance(a, float) else b
    return _round(a + b)


def format_human(value: Fraction) -> bytes:
    """``ld2string(..., LD_STR_HUMAN)``: ``"%.17Lf"``, then the zeros after the point and a bare point cut."""
    scaled = value * 10**17
    digits, rest = divmod(abs(scaled.numerator), scaled.denominator)
    if 2 * rest > scaled.denominator or (2 * rest == scaled.denominator and digits % 2):
        digits += 1
    text = _to_decimal(digits).rjust(18, "0")
    text = f"{'-' if value < 0 else ''}{text[:-17]}.{text[-17:]}".rstrip("0").rstrip(".")
    return b"0" if text == "-0" else text.encode()


def _exponent(text: bytes) -> int | None:
    """The exponent's value, or None when it has more than 7 significant digits: then the number overflows or
    underflows whatever its up to 5119 mantissa digits are (and the text may pass CPython's 4300-digit limit)."""
    digits = text.lstrip(b"+-").lstrip(b"0")
    if len(digits) > 7:
        return None
    return -int(digits or b"0") if text[:1] == b"-" else int(digits or b"0")


_CHUNK = 4000  # CPython refuses int <-> decimal text conversions past 4300 digits (sys.int_info)


def _to_int(digits: bytes, base: int) -> int:
    """``int(digits, base)`` for up to Redis's 5119 characters, past CPython's limit on decimal text."""
    if base != 10 or len(digits) <= _CHUNK:
        return int(digits, base)
    head, tail = digits[:-_CHUNK], digits[-_CHUNK:]
    return _to_int(head, 10) * 10**_CHUNK + int(tail)


def _to_decimal(n: int) -> str:
    """``str(n)`` for a non-negative ``n`` of any length (a long double prints with up to 4951 digits)."""
    if n < 10**_CHUNK:
        return str(n)
    high, low = divmod(n, 10**_CHUNK)
    return _to_decimal(high) + str(low).rjust(_CHUNK, "0")


def _round(exact: Fraction) -> Number:
    """The long double nearest to ``exact`` (ties to even), or +-INF past the largest one."""
    if exact == 0:
        return Fraction(0)
    magnitude = abs(exact)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:  # now 2**exponent <= magnitude < 2**(exponent + 1)
        exponent -= 1
    quantum = Fraction(2) ** (max(exponent, _MIN_NORMAL_EXP) - (_SIGNIFICAND_BITS - 1))
    units, rest = divmod(magnitude, quantum)
    if 2 * rest > quantum or (2 * rest == quantum and units % 2):
        units += 1
    rounded = units * quantum
    if rounded >= _OVERFLOW:
        return INF if exact > 0 else -INF
    return rounded if exact > 0 else -rounded
