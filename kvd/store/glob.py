"""Redis's glob patterns (KEYS, SCAN MATCH, CONFIG GET) with the exact semantics of ``stringmatchlen``.

Semantics (Redis ``src/util.c``), all on bytes: ``*`` any run of bytes, ``?`` one byte, ``[abc]`` a class,
``[^abc]`` a negated class (``^``, not ``!``), ``[a-z]`` a range (``[z-a]`` is swapped), ``\\x`` a literal
``x`` both outside and inside a class, a trailing ``\\`` is itself. An unterminated ``[`` takes the rest of the
pattern as its members, and a class that starts with ``]`` is empty (never matches). Quirks kept on purpose:

* an empty key matches only the empty pattern (``stringmatchlen("*", "")`` is 0; KEYS special-cases ``*``);
* with ``nocase``, literals compare ASCII-case-insensitively, a range lowers its swapped bounds and the byte
  (so ``[A-z]`` stops matching ``_``), but an escaped byte inside a class still compares exactly;
* range bounds compare as C ``char``, which is signed on x86-64 (where Redis runs): ``[a-\\xff]`` is the range
  ``-1..97`` there, i.e. ``\\x00``-``a`` plus ``\\xff``. Ranges within ASCII or within ``\\x80-\\xff`` are as
  expected;
* CVE-2022-36021: Redis gives up (no match) when its recursion nests deeper than 1000 stars. Recursion only
  happens at a star that is followed by more pattern, so a pattern with more than 1000 such star groups
  matches nothing, whatever the key. A trailing star never recurses, so ``"?*" * 1001`` can still match.

Algorithm. Every token other than ``*`` consumes exactly one byte, so a pattern is ``C0 * C1 * ... * Ck`` with
fixed-length chunks ``Ci``. ``C0`` must match at the start and ``Ck`` at the end; each middle chunk may bind to
its leftmost occurrence after the previous one (a later occurrence can only leave less room for the rest), so
no backtracking is ever needed: one forward scan, O(len(key) * len(chunk)) at worst, the same bound as Redis
with its ``skipLongerMatches`` cut, and never exponential. Chunks of plain bytes use ``bytes.find`` /
``startswith`` (C speed); chunks with ``?`` or classes become a fixed-length regular expression over explicit
byte classes (built here, never ``re.IGNORECASE``, so the nocase rules above are exact). Compiled patterns are
cached (LRU): SCAN repeats the same MATCH on every call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

__all__ = ["MAX_NESTING", "compile_glob", "glob_match"]

MAX_NESTING = 1000  # Redis: `if (nesting > 1000) return 0;`

_ALL: frozenset[int] = frozenset(range(256))
_STAR = None  # token for a run of '*'
Token = frozenset[int] | None  # the set of bytes one position accepts, or a star group


def glob_match(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Whether ``string`` matches the Redis glob ``pattern`` (see the module docstring for the exact rules)."""
    if type(pattern) is not bytes:
        pattern = bytes(pattern)
    if type(string) is not bytes:
        string = bytes(string)
    return compile_glob(pattern, nocase)(string)


@lru_cache(maxsize=512)
def compile_glob(pattern: bytes, nocase: bool = False) -> Callable[[bytes], bool]:
    """A reusable predicate for ``pattern``; literal, prefix, suffix and substring patterns skip the regex."""
    tokens = _tokenize(bytes(pattern), nocase)
    if not tokens:
        return _is_empty
    stars = tokens.count(_STAR)
    if stars - (tokens[-1] is _STAR) > MAX_NESTING or any(t is not _STAR and not t for t in tokens):
        return _never  # Redis's nesting cap, or an empty class such as "[]" that no byte can satisfy
    chunks: list[list[frozenset[int]]] = [[]]
    for token in tokens:
        if token is _STAR:
            chunks.append([])
        else:
            chunks[-1].append(token)
    compiled = [_Chunk(c, nocase) for c in chunks]
    if len(compiled) == 1:
        return _exact(compiled[0])
    first, last, middles = compiled[0], compiled[-1], compiled[1:-1]
    if not nocase and all(c.literal is not None for c in compiled) and len(middles) <= 1:
        fast = _literal_shape(first, last, middles)
        if fast is not None:
            return fast
    return _general(first, middles, last)


# -- tokens --------------------------------------------------------------------------------------------------


def _lower(c: int) -> int:
    """C ``tolower`` in the C locale: ASCII only (negative "signed char" values pass through)."""
    return c + 32 if 65 <= c <= 90 else c


def _signed(b: int) -> int:
    """A byte as x86-64's signed ``char``, which is how Redis compares range bounds."""
    return b - 256 if b >= 128 else b


_EXACT: list[frozenset[int]] = [frozenset((b,)) for b in range(256)]
_FOLDED: list[frozenset[int]] = [frozenset(x for x in range(256) if _lower(x) == _lower(b)) for b in range(256)]


def _tokenize(p: bytes, nocase: bool) -> list[Token]:
    literal = _FOLDED if nocase else _EXACT
    tokens: list[Token] = []
    i, n = 0, len(p)
    while i < n:
        c = p[i]
        if c == 42:  # '*': a run of stars is one group (Redis skips them before recursing)
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
        elif c == 63:  # '?'
            tokens.append(_ALL)
            i += 1
        elif c == 91:  # '['
            token, i = _klass(p, i + 1, nocase)
            tokens.append(token)
        elif c == 92 and i + 1 < n:  # '\x' is a literal x; a trailing '\' is itself
            tokens.append(literal[p[i + 1]])
            i += 2
        else:
            tokens.append(literal[c])
            i += 1
    return tokens


def _klass(p: bytes, i: int, nocase: bool) -> tuple[frozenset[int], int]:
    """Parse a class body starting after '['; returns (accepted bytes, index after the class)."""
    n = len(p)
    negated = i < n and p[i] == 94  # '^'
    if negated:
        i += 1
    members: set[int] = set()
    while True:
        if i < n and p[i] == 92 and n - i >= 2:  # '\x': exact, even with nocase (Redis compares raw chars)
            members.add(p[i + 1])
            i += 2
        elif i >= n:  # unterminated: the class simply ends with the pattern
            break
        elif p[i] == 93:  # ']'
            i += 1
            break
        elif n - i >= 3 and p[i + 1] == 45:  # 'a-z' (the end may be ']' or '\': Redis does not look)
            lo, hi = _signed(p[i]), _signed(p[i + 2])
            if lo > hi:
                lo, hi = hi, lo
            if nocase:  # Redis swaps first, then lowers bounds and byte alike
                lo, hi = _lower(lo), _lower(hi)
                members.update(b for b in range(256) if lo <= _lower(_signed(b)) <= hi)
            else:
                members.update(b for b in range(256) if lo <= _signed(b) <= hi)
            i += 3
        else:
            members.update(_FOLDED[p[i]] if nocase else _EXACT[p[i]])
            i += 1
    return (_ALL - members if negated else frozenset(members)), i


# -- chunks --------------------------------------------------------------------------------------------------


class _Chunk:
    """A fixed-length run of single-byte tokens between stars."""

    __slots__ = ("literal", "lowered", "regex", "size")

    def __init__(self, tokens: Sequence[frozenset[int]], nocase: bool) -> None:
        self.size = len(tokens)
        self.literal: bytes | None = None
        self.lowered = False  # literal is lower-case and must be compared against key.lower()
        self.regex: re.Pattern[bytes] | None = None
        if all(len(t) == 1 for t in tokens):
            self.literal = bytes(next(iter(t)) for t in tokens)
        elif nocase and all(t == _FOLDED[min(t)] for t in tokens):
            self.literal, self.lowered = bytes(_lower(min(t)) for t in tokens), True
        else:
            self.regex = re.compile(_regex(tokens), re.DOTALL)

    def at(self, s: bytes, low: bytes, pos: int) -> bool:
        if self.literal is not None:
            return (low if self.lowered else s).startswith(self.literal, pos)
        return self.regex.match(s, pos) is not None  # type: ignore[union-attr]

    def find(self, s: bytes, low: bytes, start: int, end: int) -> int:
        if self.literal is not None:
            return (low if self.lowered else s).find(self.literal, start, end)
        m = self.regex.search(s, start, end)  # type: ignore[union-attr]
        return -1 if m is None else m.start()


def _regex(tokens: Sequence[frozenset[int]]) -> bytes:
    out: list[bytes] = []
    dots = 0
    for t in [*tokens, None]:
        if t is _ALL:
            dots += 1
            continue
        if dots:  # '?' runs as one counted repeat: cheaper to compile and to fail
            out.append(b"." if dots == 1 else b".{%d}" % dots)
            dots = 0
        if t is None:
            break
        if len(t) == 1:
            out.append(b"\\x%02x" % next(iter(t)))
            continue
        ranges: list[bytes] = []
        values = sorted(t)
        start = prev = values[0]
        for v in [*values[1:], -2]:
            if v != prev + 1:
                ranges.append(b"\\x%02x" % start if start == prev else b"\\x%02x-\\x%02x" % (start, prev))
                start = v
            prev = v
        out.append(b"[" + b"".join(ranges) + b"]")
    return b"".join(out)


# -- matchers ------------------------------------------------------------------------------------------------


def _never(_s: bytes) -> bool:
    return False


def _is_empty(s: bytes) -> bool:
    return not s


def _exact(chunk: _Chunk) -> Callable[[bytes], bool]:
    if chunk.literal is not None:
        literal = chunk.literal
        if chunk.lowered:
            return lambda s: s.lower() == literal
        return lambda s: s == literal
    regex = chunk.regex
    assert regex is not None
    return lambda s: regex.fullmatch(s) is not None


def _literal_shape(first: _Chunk, last: _Chunk, middles: list[_Chunk]) -> Callable[[bytes], bool] | None:
    """``*``, ``abc*``, ``*abc``, ``*abc*``: one C-level bytes operation each (empty keys never match)."""
    a, z = first.literal or b"", last.literal or b""
    if middles:
        mid = middles[0].literal or b""
        if not a and not z:
            return lambda s: mid in s
        return None
    if not a and not z:
        return _nonempty
    if not z:
        return lambda s: s.startswith(a)
    if not a:
        return lambda s: s.endswith(z)
    need = len(a) + len(z)
    return lambda s: len(s) >= need and s.startswith(a) and s.endswith(z)


def _nonempty(s: bytes) -> bool:
    return len(s) > 0


def _general(first: _Chunk, middles: list[_Chunk], last: _Chunk) -> Callable[[bytes], bool]:
    minimum = max(1, first.size + last.size + sum(c.size for c in middles))
    lowers = any(c.lowered for c in (first, last, *middles))

    def match(s: bytes) -> bool:
        n = len(s)
        if n < minimum:
            return False
        low = s.lower() if lowers else s  # same length and offsets as s: bytes.lower() is ASCII-only
        end = n - last.size
        if not (first.at(s, low, 0) and last.at(s, low, end)):
            return False
        pos = first.size
        for chunk in middles:  # leftmost binding is always enough: no backtracking
            found = chunk.find(s, low, pos, end)
            if found < 0:
                return False
            pos = found + chunk.size
        return True

    return match
