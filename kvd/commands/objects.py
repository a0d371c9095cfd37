"""OBJECT ENCODING, REFCOUNT, IDLETIME, FREQ and HELP: how a key's value is held (Redis's ``object.c``).

kvd stores every value as bytes and keeps no Redis encodings, so ENCODING answers the one Redis would use for
the same value: ``int`` for an integer of up to 20 characters in its canonical form, ``embstr`` up to 44 bytes,
``raw`` beyond, and ``raw`` for what APPEND, SETRANGE and the bitmap commands built (kvd builds those as
bytearrays, as Redis builds them as raw strings). One difference: an INCRBYFLOAT result that reads as an integer
("3") answers ``int``, where Redis, which does not try to encode that result, answers ``embstr``.

REFCOUNT answers 2147483647 for the integers 0-9999 that Redis shares when no LRU or LFU policy with a memory
limit stops it, else 1. IDLETIME is the seconds since the value was last written or read (kvd's LRU clock, whole
seconds as Redis's; CLIENT NO-TOUCH reads and OBJECT itself do not count); under an ``-lfu`` policy it answers
Redis's error, as FREQ, the access counter (kvd/store/lfu.py), does under any other policy.

OBJECT does not touch the key. A key whose value is on disk answers IDLETIME and REFCOUNT from memory; its
ENCODING needs the value's bytes only when it is 44 bytes or shorter, and then reads them from disk, leaving the
value there and the key's access history as it was; a short value APPEND or SETRANGE built stays ``raw`` across
a stay on disk, as it would in Redis's memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvd.protocol.errors import CommandError
from kvd.store.keyspace import SMALL_VALUE, Entry, Value

from .args import parse_int
from .registry import LOADING, READONLY, STALE, command, run_subcommand, subcommand_help
from .values import then

if TYPE_CHECKING:
    from kvd.connection import Client

G = "generic"
SHARED_REFCOUNT = 2**31 - 1  # Redis's OBJ_SHARED_REFCOUNT
SHARED_INTEGERS = 10000


def encoding(value: Value) -> bytes:
    """Redis's ``tryObjectEncoding`` of a string value as kvd holds it."""
    if type(value) is not bytes or len(value) > SMALL_VALUE:
        return b"raw"
    if len(value) <= 20 and _integer(value) is not None:
        return b"int"
    return b"embstr"


def _integer(value: bytes) -> int | None:
    try:
        return parse_int(value)
    except CommandError:
        return None


@command(
    "object",
    -2,
    "",
    group=G,
    since="2.2.3",
    summary="A container for object introspection commands.",
    usage="subcommand [argument [argument ...]]",
    complexity="Depends on subcommand.",
)
def object_(c: Client, argv: list[Any]) -> Any:
    return run_subcommand(c, argv, "object")


def _lookup(c: Client, key: bytes) -> Entry | None:
    """The entry, untouched, counted as a hit or a miss but no keymiss event (Redis's LOOKUP_NOTOUCH |
    LOOKUP_NONOTIFY); a miss answers null."""
    entry = c.keyspace.lookup_read(key, keymiss=False)
    if entry is None:
        c.reply.null()
    return entry


@command(
    "encoding",
    3,
    READONLY,
    (2, 2, 1),
    group=G,
    since="2.2.3",
    parent="object",
    summary="Returns the internal encoding of a Redis object.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO",
)
def object_encoding(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[2])
    entry = _lookup(c, key)
    if entry is None:
        return None
    return with_encoding(c, key, entry, lambda name: c.reply.null() if name is None else c.reply.bulk(name))


def with_encoding(c: Client, key: bytes, entry: Entry, use: Callable[[bytes | None], None]) -> Any:
    """Call ``use`` with the entry's encoding (None: the value went away while it was read). A cold value is
    read only when it is short enough to be anything but ``raw``, and stays on disk, untouched; returns what the
    connection must await, if anything (``then``)."""
    if entry.value is not None:
        use(encoding(entry.value))
        return None
    if entry.value_len > SMALL_VALUE:
        use(b"raw")
        return None
    return then(c.keyspace.read_untouched(key, entry), lambda v: use(None if v is None else encoding(v)))


def refcount(c: Client, entry: Entry) -> int:
    """What Redis's refcount of the value would be: shared small integers, unless an LRU or LFU policy with a
    limit keeps Redis from sharing them."""
    settings = c.server.settings
    value = entry.value
    shared = (
        (settings.maxmemory == 0 or c.keyspace.eviction.shares_integers)
        and value is not None
        and encoding(value) == b"int"
        and 0 <= int(value) < SHARED_INTEGERS
    )
    return SHARED_REFCOUNT if shared else 1


@command(
    "refcount",
    3,
    READONLY,
    (2, 2, 1),
    group=G,
    since="2.2.3",
    parent="object",
    summary="Returns the reference count of a value of a key.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO",
)
def object_refcount(c: Client, argv: list[Any]) -> None:
    entry = _lookup(c, bytes(argv[2]))
    if entry is not None:
        c.reply.integer(refcount(c, entry))


@command(
    "idletime",
    3,
    READONLY,
    (2, 2, 1),
    group=G,
    since="2.2.3",
    parent="object",
    summary="Returns the time since the last access to a Redis object.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO",
)
def object_idletime(c: Client, argv: list[Any]) -> None:
    entry = _lookup(c, bytes(argv[2]))
    if entry is not None:
        if c.keyspace.ram.lfu is not None:
            raise CommandError(
                "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching "
                "between policies at runtime LRU and LFU data will take some time to adjust."
            )
        # The clock the stamps came from (the tick's, as Redis's estimateObjectIdleTime uses its cached LRU
        # clock): a value read in this second is 0 seconds idle, whatever the wall clock did since the tick.
        c.reply.integer(max(c.keyspace.ram.clock - entry.atime, 0))


@command(
    "freq",
    3,
    READONLY,
    (2, 2, 1),
    group=G,
    since="4.0.0",
    parent="object",
    summary="Returns the logarithmic access frequency counter of a Redis object.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO",
)
def object_freq(c: Client, argv: list[Any]) -> None:
    entry = _lookup(c, bytes(argv[2]))
    if entry is not None:
        frequency = c.keyspace.access_frequency(entry)
        if frequency is None:
            raise CommandError(
                "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when "
                "switching between policies at runtime LRU and LFU data will take some time to adjust."
            )
        c.reply.integer(frequency)


@command(
    "help",
    2,
    f"{LOADING} {STALE}",
    group=G,
    since="6.2.0",
    parent="object",
    summary="Returns helpful text about the different subcommands.",
)
def object_help(c: Client, argv: list[Any]) -> None:
    subcommand_help(c, "object")
