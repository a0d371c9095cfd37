"""SORT and SORT_RO (Redis's ``sort.c``) for a keyspace of strings.

SORT orders the elements of a list, a set or a sorted set. kvd stores strings only, so what SORT can meet is a
missing key, which Redis sorts as an empty list, or a string, which Redis refuses with WRONGTYPE: kvd answers
both as Redis does, after checking the options in Redis's order with its errors (LIMIT's integers, a STORE that
SORT_RO does not take). With STORE an empty result deletes the destination, as in Redis, and answers 0. BY and
GET patterns are accepted and, with nothing to sort, look nothing up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, notify
from kvd.protocol import errors
from kvd.protocol.errors import CommandError

from .args import option, parse_int
from .registry import DENYOOM, MOVABLEKEYS, READONLY, WRITE, KeysAndFlags, KeySpec, command

if TYPE_CHECKING:
    from kvd.connection import Client

G = "generic"

# SORT's keys past the first: BY and GET patterns name keys only through the sorted elements, and STORE may come
# anywhere, so the specs say "unknown" for both and ``_sort_keys`` finds the STORE key (Redis's sortGetKeys).
_SORTED = KeySpec(("RO", "access"), 1)
_BY_GET = KeySpec(
    ("RO", "access"),
    notes="For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the content of "
    "the key we sort",
)
_STORE = KeySpec(
    ("OW", "update"),
    notes="For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere in the "
    "argument array",
)
_OPTION_ARGS = {b"limit": 2, b"get": 1, b"by": 1}


def _sort_keys(argv: list[Any]) -> KeysAndFlags:
    """The sorted key, and the last STORE's destination, skipping the options' arguments as Redis does."""
    store = 0
    i = 2
    while i < len(argv):
        word = option(argv[i])
        if word in _OPTION_ARGS:
            i += _OPTION_ARGS[word]
        elif word == b"store" and i + 1 < len(argv):
            store = i + 1
        i += 1
    return [(1, _SORTED.flags), (store, _STORE.flags)] if store else [(1, _SORTED.flags)]


def _sort(c: Client, argv: list[Any], read_only: bool) -> None:
    store: bytes | None = None
    j = 2
    while j < len(argv):
        word = option(argv[j])
        left = len(argv) - j - 1
        if word in (b"asc", b"desc", b"alpha"):
            pass
        elif word == b"limit" and left >= 2:
            parse_int(argv[j + 1])
            parse_int(argv[j + 2])
            j += 2
        elif word == b"store" and left >= 1 and not read_only:
            store = bytes(argv[j + 1])
            j += 1
        elif word in (b"by", b"get") and left >= 1:
            j += 1
        else:
            raise CommandError(errors.SYNTAX)
        j += 1
    if (entry := c.keyspace.lookup_read(bytes(argv[1]))) is not None:
        c.keyspace.access(entry)  # Redis's SORT reads the key before it finds the type wrong
        raise CommandError(errors.WRONGTYPE)  # a string: SORT takes lists, sets and sorted sets
    if store is None:
        c.reply.array(0)
        return
    if c.keyspace.delete(store):
        notify(c.keyspace, GENERIC, b"del", store)
    c.reply.integer(0)


@command(
    "sort",
    -2,
    f"{WRITE} {DENYOOM} {MOVABLEKEYS}",
    (1, 1, 1),
    group=G,
    complexity="O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of "
    "returned elements. When the elements are not sorted, complexity is O(N).",
    summary="Sorts the elements in a list, a set, or a sorted set, optionally storing the result.",
    usage="key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC | DESC] [ALPHA] "
    "[STORE destination]",
    key_specs=(_SORTED, _BY_GET, _STORE),
    get_keys=_sort_keys,
)
def sort(c: Client, argv: list[Any]) -> None:
    _sort(c, argv, read_only=False)


@command(
    "sort_ro",
    -2,
    f"{READONLY} {MOVABLEKEYS}",
    (1, 1, 1),
    group=G,
    since="7.0.0",
    complexity="O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of "
    "returned elements. When the elements are not sorted, complexity is O(N).",
    summary="Returns the sorted elements of a list, a set, or a sorted set.",
    usage="key [BY pattern] [LIMIT offset count] [GET pattern [GET pattern ...]] [ASC | DESC] [ALPHA]",
    key_specs=(_SORTED, _BY_GET),
    get_keys=lambda argv: [(1, _SORTED.flags)],
)
def sort_ro(c: Client, argv: list[Any]) -> None:
    _sort(c, argv, read_only=True)
