"""LCS: the longest common subsequence of two string values (Redis 7 ``lcsCommand``, ``t_string.c``).

Redis fills the whole (len(a) + 1) x (len(b) + 1) table of 32-bit lengths and walks it back; so does kvd, with
the same limit (the table may not exceed proto-max-bulk-len bytes, 134 million cells by default) and the same
walk, so that among several equally long subsequences both servers answer the same one, with the same IDX runs.
The table and the walk are C (``_lcs.c``); ``lcs_python`` below is the same in Python, for installs without a
compiler, where an LCS of two 10 KiB values takes minutes instead of a fraction of a second.

Like Redis's, the command runs on the event loop, and other clients wait for it: O(N * M) time, O(N * M)
transient memory. It is a string command for small strings; a KV-cache chunk is never its input.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.keyspace import Value

from .args import option, parse_int
from .registry import READONLY, command
from .values import with_all

try:
    from kvd.commands._lcs import lcs as _lcs_c
except ImportError:  # pragma: no cover - exercised by tests/unit/test_lcs.py through the Python version
    _lcs_c = None

if TYPE_CHECKING:
    from kvd.connection import Client

Match = tuple[int, int, int, int, int]  # a_start, a_end, b_start, b_end, length
Found = tuple[int, bytes, list[Match] | None]  # length, the subsequence, IDX's runs


def common_subsequence(a: Any, b: Any, want_matches: bool, min_len: int) -> Found | None:
    """(length, the subsequence, IDX's runs last first or None), or None when the table cannot be allocated."""
    if _lcs_c is not None:
        return _lcs_c(a, b, want_matches, min_len)
    return lcs_python(bytes(a), bytes(b), want_matches, min_len)


def lcs_python(a: bytes, b: bytes, want_matches: bool, min_len: int) -> Found:
    rows = [[0] * (len(b) + 1)]
    for ai in a:
        up = rows[-1]
        row = [0]
        for j, bj in enumerate(b, 1):
            row.append(up[j - 1] + 1 if ai == bj else max(up[j], row[j - 1]))
        rows.append(row)
    length = rows[-1][-1]
    out = bytearray(length)
    matches: list[Match] | None = [] if want_matches else None
    i, j, idx = len(a), len(b), length
    a_start = a_end = b_start = b_end = -1  # a_start -1: no run open
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            idx -= 1
            out[idx] = a[i - 1]
            if a_start < 0:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start, b_start = a_start - 1, b_start - 1
            else:
                emit = True
            emit = emit or a_start == 0 or b_start == 0
            i, j = i - 1, j - 1
        else:
            if rows[i - 1][j] > rows[i][j - 1]:
                i -= 1
            else:
                j -= 1
            emit = a_start >= 0
        if emit:
            run = a_end - a_start + 1
            if matches is not None and (min_len == 0 or run >= min_len):
                matches.append((a_start, a_end, b_start, b_end, run))
            a_start = -1
    return length, bytes(out), matches


@command(
    "lcs",
    -3,
    READONLY,
    (1, 2, 1),
    group="string",
    since="7.0.0",
    complexity="O(N*M) where N and M are the lengths of s1 and s2, respectively",
    summary="Finds the longest common substring.",
    usage="key1 key2 [LEN] [IDX] [MINMATCHLEN min-match-len] [WITHMATCHLEN]",
    key_flags="RO access",
)
def lcs(c: Client, argv: list[Any]) -> Any:
    def answer(values: list[Value | None]) -> None:
        # Redis reads both keys, then the options.
        want_len = want_idx = with_len = False
        min_len = 0
        j = 3
        while j < len(argv):
            word = option(argv[j])
            if word == b"idx":
                want_idx = True
            elif word == b"len":
                want_len = True
            elif word == b"withmatchlen":
                with_len = True
            elif word == b"minmatchlen" and j + 1 < len(argv):
                min_len = max(parse_int(argv[j + 1]), 0)
                j += 1
            else:
                raise CommandError(errors.SYNTAX)
            j += 1
        if want_len and want_idx:
            raise CommandError("ERR If you want both the length and indexes, please just use IDX.")
        a, b = (v if v is not None else b"" for v in values)
        if len(a) >= 2**32 - 2 or len(b) >= 2**32 - 2:
            raise CommandError("ERR String too long for LCS")
        if (len(a) + 1) * (len(b) + 1) * 4 > c.server.settings.proto_max_bulk_len:
            raise CommandError("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
        found = common_subsequence(a, b, want_idx, min_len)
        if found is None:
            raise CommandError("ERR Insufficient memory, failed allocating transient memory for LCS")
        length, common, matches = found
        r = c.reply
        if want_idx:
            assert matches is not None
            r.map(2)
            r.bulk(b"matches")
            r.array(len(matches))
            for a_start, a_end, b_start, b_end, run in matches:
                r.array(3 if with_len else 2)
                r.array(2)
                r.integer(a_start)
                r.integer(a_end)
                r.array(2)
                r.integer(b_start)
                r.integer(b_end)
                if with_len:
                    r.integer(run)
            r.bulk(b"len")
            r.integer(length)
        elif want_len:
            r.integer(length)
        else:
            r.bulk(common)

    return with_all(c, [bytes(argv[1]), bytes(argv[2])], answer)
