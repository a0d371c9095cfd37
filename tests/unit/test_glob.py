"""kvd.store.glob against a line-by-line port of Redis's recursive ``stringmatchlen_impl``.

The reference below keeps Redis's control flow (``skipLongerMatches``, the nesting cap, the class loop that
reads the pattern's NUL terminator, signed ``char`` range bounds) so that the property tests compare the fast
matcher with Redis itself rather than with a re-statement of the rules.
"""

from __future__ import annotations

import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvd.store.glob import MAX_NESTING, compile_glob, glob_match


def _tolower(c: int) -> int:
    return c + 32 if 65 <= c <= 90 else c


def _char(b: int) -> int:
    return b - 256 if b >= 128 else b  # x86-64 C char is signed


def redis_stringmatchlen(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    skip = [False]

    def at(i: int) -> int:  # the sds terminator stands beyond the end
        return pattern[i] if 0 <= i < len(pattern) else 0

    def impl(pi: int, plen: int, si: int, slen: int, nesting: int) -> bool:
        if nesting > 1000:
            return False
        while plen and slen:
            c = at(pi)
            if c == 42:  # '*'
                while plen and at(pi + 1) == 42:
                    pi += 1
                    plen -= 1
                if plen == 1:
                    return True
                while slen:
                    if impl(pi + 1, plen - 1, si, slen, nesting + 1):
                        return True
                    if skip[0]:
                        return False
                    si += 1
                    slen -= 1
                skip[0] = True
                return False
            elif c == 63:  # '?'
                si += 1
                slen -= 1
            elif c == 91:  # '['
                pi += 1
                plen -= 1
                negate = at(pi) == 94
                if negate:
                    pi += 1
                    plen -= 1
                match = False
                sc = string[si]
                while True:
                    if at(pi) == 92 and plen >= 2:
                        pi += 1
                        plen -= 1
                        if at(pi) == sc:
                            match = True
                    elif at(pi) == 93:
                        break
                    elif plen == 0:
                        pi -= 1
                        plen += 1
                        break
                    elif plen >= 3 and at(pi + 1) == 45:
                        start, end, ch = _char(at(pi)), _char(at(pi + 2)), _char(sc)
                        if start > end:
                            start, end = end, start
                        if nocase:
                            start, end, ch = _tolower(start), _tolower(end), _tolower(ch)
                        pi += 2
                        plen -= 2
                        if start <= ch <= end:
                            match = True
                    elif (_tolower(at(pi)) == _tolower(sc)) if nocase else (at(pi) == sc):
                        match = True
                    pi += 1
                    plen -= 1
                if negate:
                    match = not match
                if not match:
                    return False
                si += 1
                slen -= 1
            else:
                if c == 92 and plen >= 2:
                    pi += 1
                    plen -= 1
                p, s = at(pi), string[si]
                if (_tolower(p) != _tolower(s)) if nocase else (p != s):
                    return False
                si += 1
                slen -= 1
            pi += 1
            plen -= 1
            if slen == 0:
                while at(pi) == 42:
                    pi += 1
                    plen -= 1
                break
        return plen == 0 and slen == 0

    return impl(0, len(pattern), 0, len(string), 0)


# -- Redis's documented examples and the edge cases of its implementation -----------------------------------

CASES = [
    (b"h?llo", b"hello", True),
    (b"h?llo", b"hallo", True),
    (b"h?llo", b"hllo", False),
    (b"h*llo", b"hllo", True),
    (b"h*llo", b"heeeello", True),
    (b"h[ae]llo", b"hello", True),
    (b"h[ae]llo", b"hallo", True),
    (b"h[ae]llo", b"hillo", False),
    (b"h[^e]llo", b"hallo", True),
    (b"h[^e]llo", b"hbllo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hallo", True),
    (b"h[a-b]llo", b"hbllo", True),
    (b"h[a-b]llo", b"hcllo", False),
    (b"h[b-a]llo", b"hallo", True),  # reversed range is swapped
    (b"h[!e]llo", b"hallo", False),  # '!' is not negation
    (b"h[!e]llo", b"h!llo", True),
    (b"h\\*llo", b"h*llo", True),
    (b"h\\*llo", b"hello", False),
    (b"h\\?llo", b"h?llo", True),
    (b"h\\[a]llo", b"h[a]llo", True),
    (b"h[\\]]llo", b"h]llo", True),
    (b"h[\\^a]llo", b"h^llo", True),
    (b"h[a\\-z]llo", b"h-llo", True),
    (b"h[a\\-z]llo", b"hbllo", False),
    (b"\\", b"\\", True),  # trailing backslash is itself
    (b"a\\", b"a\\", True),
    (b"[]a", b"a", False),  # "[]" is an empty class
    (b"[]a", b"]a", False),
    (b"[^]a", b"xa", True),
    (b"[", b"a", False),  # unterminated, empty
    (b"[^", b"a", True),
    (b"[ab", b"b", True),  # unterminated class takes the rest of the pattern
    (b"[ab", b"ab", False),
    (b"x[a-]", b"x^", True),  # 'a-]' is the range ']'..'a'; then the class is unterminated
    (b"*", b"", False),  # Redis: an empty key matches only the empty pattern
    (b"", b"", True),
    (b"", b"a", False),
    (b"a*", b"a", True),
    (b"*a", b"a", True),
    (b"**a**", b"ba", True),
    (b"*a*b*c", b"xaybzc", True),
    (b"*a*b*c", b"xaybzcd", False),
    (b"a*b", b"ab", True),
    (b"a*b", b"abab", True),
    (b"a*b", b"aba", False),
    (b"*\x00*", b"a\x00b", True),
    (b"[\x80-\xff]", b"\x90", True),
    (b"[a-\xff]", b"\xff", True),  # signed char: the range is -1..'a'
    (b"[a-\xff]", b"\x05", True),
    (b"[a-\xff]", b"\x90", False),
]


@pytest.mark.parametrize(("pattern", "string", "expected"), CASES)
def test_table(pattern: bytes, string: bytes, expected: bool) -> None:
    assert redis_stringmatchlen(pattern, string) is expected, "the reference disagrees with the table"
    assert glob_match(pattern, string) is expected


NOCASE = [
    (b"H?LLO", b"hello", True),
    (b"h[A-Z]llo", b"hello", True),
    (b"h[E]llo", b"hello", True),
    (b"h[\\E]llo", b"hello", False),  # an escaped byte inside a class compares exactly
    (b"h\\Ello", b"hello", True),  # ...but an escaped literal outside one does not
    (b"[A-z]", b"_", False),  # bounds are lowered after the swap: 'a'..'z'
    (b"[a-Z]", b"q", False),  # swapped to Z..a, lowered to z..a: empty
    (b"*FOO*", b"xfoox", True),
    (b"maxmemory*", b"MAXMEMORY-policy", True),
]


@pytest.mark.parametrize(("pattern", "string", "expected"), NOCASE)
def test_nocase_table(pattern: bytes, string: bytes, expected: bool) -> None:
    assert redis_stringmatchlen(pattern, string, nocase=True) is expected
    assert glob_match(pattern, string, nocase=True) is expected
    assert compile_glob(pattern, True)(string) is expected


def test_case_sensitive_by_default() -> None:
    assert not glob_match(b"HELLO", b"hello")
    assert glob_match(b"HELLO", b"hello", nocase=True)


def test_accepts_bytearray_and_memoryview() -> None:
    assert glob_match(bytearray(b"k*"), memoryview(b"key"))


# -- property tests against the reference --------------------------------------------------------------------

PATTERN_BYTES = st.sampled_from(list(b"ab*?[]^-\\A\xff"))
KEY_BYTES = st.sampled_from(list(b"ab]^-\\A_\xff"))


@settings(max_examples=1500, deadline=None)
@given(
    pattern=st.lists(PATTERN_BYTES, max_size=10).map(bytes),
    string=st.lists(KEY_BYTES, max_size=8).map(bytes),
    nocase=st.booleans(),
)
def test_matches_redis_reference(pattern: bytes, string: bytes, nocase: bool) -> None:
    assert glob_match(pattern, string, nocase) is redis_stringmatchlen(pattern, string, nocase)


@settings(max_examples=800, deadline=None)
@given(
    pattern=st.lists(st.sampled_from([b"a", b"b", b"*", b"?", b"[ab]", b"[^a]", b"ab"]), max_size=8).map(b"".join),
    string=st.lists(st.sampled_from(list(b"ab")), max_size=14).map(bytes),
)
def test_star_heavy_patterns_match_reference(pattern: bytes, string: bytes) -> None:
    assert glob_match(pattern, string) is redis_stringmatchlen(pattern, string)


@settings(max_examples=300, deadline=None)
@given(pattern=st.binary(max_size=12), string=st.binary(max_size=10), nocase=st.booleans())
def test_arbitrary_bytes_match_reference(pattern: bytes, string: bytes, nocase: bool) -> None:
    assert glob_match(pattern, string, nocase) is redis_stringmatchlen(pattern, string, nocase)


# -- the nesting cap (CVE-2022-36021) ------------------------------------------------------------------------


@pytest.fixture
def deep_recursion():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20000))
    yield
    sys.setrecursionlimit(old)


@pytest.mark.parametrize(
    ("pattern", "string"),
    [
        (b"*a" * MAX_NESTING, b"a" * MAX_NESTING),  # exactly at the cap: matches
        (b"*a" * (MAX_NESTING + 1), b"a" * (MAX_NESTING + 1)),  # one star over: no match
        (b"*a" * MAX_NESTING + b"*", b"a" * (MAX_NESTING + 5)),  # a trailing star does not recurse
        (b"?*" * (MAX_NESTING + 1), b"a" * (MAX_NESTING + 1)),
        (b"?*" * (MAX_NESTING + 2), b"a" * (MAX_NESTING + 2)),
    ],
)
def test_nesting_cap_matches_redis(deep_recursion, pattern: bytes, string: bytes) -> None:
    assert glob_match(pattern, string) is redis_stringmatchlen(pattern, string)


def test_cve_2022_36021_pattern_is_fast() -> None:
    started = time.perf_counter()
    assert glob_match(b"*?" * 50000, b"a" * 50000) is False
    assert glob_match(b"*a" * 900 + b"*b", b"a" * 50000) is False  # under the cap: still one forward scan
    assert glob_match(b"*" + b"a" * 900 + b"b*", b"a" * 50000) is False
    assert glob_match(b"*?" * 900 + b"*", b"a" * 50000) is True
    assert time.perf_counter() - started < 1.0


def test_compile_glob_is_reusable() -> None:
    match = compile_glob(b"user:*:kv[0-9]")
    assert match(b"user:42:kv7")
    assert not match(b"user:42:kvx")
    assert compile_glob(b"user:*:kv[0-9]") is match  # cached
