"""LCS's table and walk: C (``_lcs.c``) and Python agree on the subsequence, its length and IDX's runs, and the
length is checked against an independent model (the classic recursion, memoised). The command's replies are
compared with redis-server's in tests/compat/test_differential.py."""

from __future__ import annotations

import functools
import random

import pytest

from kvd.commands import lcs


def model_length(a: bytes, b: bytes) -> int:
    @functools.cache
    def length(i: int, j: int) -> int:
        if i == len(a) or j == len(b):
            return 0
        if a[i] == b[j]:
            return 1 + length(i + 1, j + 1)
        return max(length(i + 1, j), length(i, j + 1))

    return length(0, 0)


def is_subsequence(s: bytes, of: bytes) -> bool:
    it = iter(of)
    return all(ch in it for ch in s)


def pairs() -> list[tuple[bytes, bytes]]:
    rng = random.Random(4)
    out = [(b"", b""), (b"a", b""), (b"ohmytext", b"mynewtext"), (b"abc", b"abc"), (b"abc", b"xyz")]
    for _ in range(150):
        alphabet = rng.choice([b"ab", b"abc", b"acgt", bytes(range(256))])
        out.append(tuple(bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 30))) for _ in "ab"))
    return out


def test_python_matches_the_model_and_redis_docs_example() -> None:
    length, common, matches = lcs.lcs_python(b"ohmytext", b"mynewtext", True, 0)
    assert (length, common) == (6, b"mytext")
    assert matches == [(4, 7, 5, 8, 4), (2, 3, 0, 1, 2)]  # the example in Redis's LCS documentation
    for a, b in pairs():
        length, common, _ = lcs.lcs_python(a, b, False, 0)
        assert length == model_length(a, b) == len(common)
        assert is_subsequence(common, a) and is_subsequence(common, b)


@pytest.mark.skipif(lcs._lcs_c is None, reason="kvd/commands/_lcs.c was not built")
def test_c_and_python_agree() -> None:
    for a, b in pairs():
        for min_len in (0, 2):
            assert lcs._lcs_c(a, b, True, min_len) == lcs.lcs_python(a, b, True, min_len), (a, b)
        assert lcs._lcs_c(memoryview(a), bytearray(b), False, 0) == lcs.lcs_python(a, b, False, 0)
