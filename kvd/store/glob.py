"""Redis's glob patterns (KEYS, SCAN MATCH, CONFIG GET), compiled to backtracking-safe regular expressions.

Semantics are those of ``stringmatchlen`` in Redis's ``util.c``, not Python's ``fnmatch``: ``*`` any run of
bytes, ``?`` one byte, ``[abc]`` a class, ``[^abc]`` a negated class (``^``, not ``!``), ``[a-z]`` a range
(reversed ranges are swapped), ``\\x`` escapes, both in the pattern and inside a class; an unterminated class
ends at the end of the pattern. Patterns and keys are bytes.

Speed and safety. A naive recursive matcher is exponential on patterns like ``*a*a*a*b`` (CVE-2022-36021);
Redis caps its recursion at 1000 nested ``*`` and returns "no match" beyond. Here the pattern is compiled into
a regular expression in which every ``*`` except the last is an *atomic* lazy group ``(?>.*?CHUNK)``: each
intermediate chunk binds to its leftmost occurrence and is never retried, which is always sufficient for glob
matching, so matching costs O(len(key) * len(pattern)) at worst, never exponential. Redis's cap is kept as a
rule: a pattern with more than 1000 ``*`` groups matches nothing, exactly as Redis answers it. Compiled
patterns are cached (LRU, 512 entries): SCAN calls repeat the same MATCH.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

MAX_STAR_GROUPS = 1000


def glob_match(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    return compile_glob(bytes(pattern), nocase)(bytes(string))


@lru_cache(maxsize=512)
def compile_glob(pattern: bytes, nocase: bool = False) -> Callable[[bytes], bool]:
    """A predicate for ``pattern``; literal and ``prefix*`` patterns skip the regex engine."""
    tokens = _tokenize(pattern)
    stars = sum(1 for t in tokens if t == "*")
    if stars > MAX_STAR_GROUPS:
        return lambda _s: False
    if not nocase and all(isinstance(t, bytes) for t in tokens):
        literal = b"".join(tokens)  # type: ignore[arg-type]
        return lambda s: s == literal
    if not nocase and tokens[-1:] == ["*"] and all(isinstance(t, bytes) for t in tokens[:-1]):
        prefix = b"".join(tokens[:-1])  # type: ignore[arg-type]
        return lambda s: s.startswith(prefix)
    regex = re.compile(_to_regex(tokens), re.DOTALL | (re.IGNORECASE if nocase else 0))
    return lambda s: regex.fullmatch(s) is not None


Token = bytes | str | tuple[bool, list[tuple[int, int]]]  # literal | "*" / "?" | (negated, ranges)


def _tokenize(p: bytes) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == 42:  # '*': consecutive stars are one group
            if not tokens or tokens[-1] != "*":
                tokens.append("*")
            i += 1
        elif c == 63:  # '?'
            tokens.append("?")
            i += 1
        elif c == 91:  # '['
            i += 1
            negated = i < n and p[i] == 94
            if negated:
                i += 1
            ranges: list[tuple[int, int]] = []
            while i < n and p[i] != 93:  # ']'
                if p[i] == 92 and i + 1 < n:  # '\' escapes the next byte
                    ranges.append((p[i + 1], p[i + 1]))
                    i += 2
                elif i + 2 < n and p[i + 1] == 45:  # 'a-z'
                    lo, hi = p[i], p[i + 2]
                    ranges.append((min(lo, hi), max(lo, hi)))
                    i += 3
                else:
                    ranges.append((p[i], p[i]))
                    i += 1
            i += 1  # the ']' (or the end of an unterminated class)
            tokens.append((negated, ranges))
        elif c == 92 and i + 1 < n:  # '\x' is a literal x; a trailing '\' is itself
            tokens.append(p[i + 1 : i + 2])
            i += 2
        else:
            tokens.append(p[i : i + 1])
            i += 1
    return tokens


def _piece(token: Token) -> str:
    if isinstance(token, bytes):
        return re.escape(token.decode("latin-1"))
    if token == "?":
        return "."
    negated, ranges = token  # type: ignore[misc]
    if not ranges:
        return "." if negated else "(?!)"
    body = "".join(f"\\x{lo:02x}" if lo == hi else f"\\x{lo:02x}-\\x{hi:02x}" for lo, hi in ranges)
    return f"[{'^' if negated else ''}{body}]"


def _to_regex(tokens: list[Token]) -> bytes:
    chunks: list[list[Token]] = [[]]
    for token in tokens:
        if token == "*":
            chunks.append([])
        else:
            chunks[-1].append(token)
    parts = ["".join(_piece(t) for t in chunk) for chunk in chunks]
    if len(parts) == 1:
        return parts[0].encode("latin-1")
    middle = "".join(f"(?>.*?{part})" for part in parts[1:-1])
    return f"{parts[0]}{middle}.*{parts[-1]}".encode("latin-1")
