"""String commands: SET and its family, GET and its family, ranges and counters (Redis ``t_string.c``).

Values are opaque bytes: KV-cache chunks arrive as bytearrays received in place by the parser and are stored
without a copy. Commands that derive a new value (APPEND, SETRANGE, INCR) build a new object rather than
mutating the stored one, because replies and in-flight disk writes may still hold views of it. APPEND and
SETRANGE build a bytearray, which OBJECT ENCODING reports as Redis reports their results: raw. They read the
old value through ``with_current`` (``values.py``), so a read from the disk tier never ends in a lost update.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, STRING, notify
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.protocol.reply import OK
from kvd.store.keyspace import KEPT, Value, now_ms

from . import longdouble
from .args import LLONG_MAX, lower, parse_int
from .registry import DENYOOM, FAST, READONLY, WRITE, KeySpec, command
from .values import then, with_current

if TYPE_CHECKING:
    from kvd.connection import Client

G = "string"


def _expire_at(c: Client, unit: bytes, raw: bytes, name: str) -> int:
    """Absolute deadline in ms for EX/PX/EXAT/PXAT ``raw``; Redis's errors for junk, <= 0 and overflow."""
    value = parse_int(raw)
    if value <= 0:
        raise CommandError(errors.invalid_expire(name))
    if unit in (b"ex", b"exat"):
        if value > LLONG_MAX // 1000:
            raise CommandError(errors.invalid_expire(name))
        value *= 1000
    if unit in (b"ex", b"px"):
        base = now_ms()
        if value > LLONG_MAX - base:
            raise CommandError(errors.invalid_expire(name))
        value += base
    return value


def _reply_value(c: Client, value: Any) -> Any:
    """Reply with a value (or null) that may still be on disk."""
    if value is None:
        c.reply.null()
        return None
    if type(value) is bytes or type(value) is bytearray:  # resident: the common case, no closure built
        c.reply.bulk(value)
        return None
    return then(value, lambda v: c.reply.null() if v is None else c.reply.bulk(v))


@command(
    "get",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Returns the string value of a key.",
    usage="key",
    key_flags="RO access",
)
def get(c: Client, argv: list[Any]) -> Any:
    value = c.keyspace.get(bytes(argv[1]))
    if type(value) is bytes or type(value) is bytearray:
        c.reply.bulk(value)
        return None
    return _reply_value(c, value)


# What SET does to its key: overwrites it, or with GET reads it too (Redis's setGetKeys).
SET_KEY = ("OW", "update")
SET_GET_KEY = ("RW", "access", "update")


@command(
    "set",
    -3,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="1.0.0",
    summary="Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
    usage="key value [NX | XX] [GET] [EX seconds | PX milliseconds | EXAT unix-time-seconds | "
    "PXAT unix-time-milliseconds | KEEPTTL]",
    key_specs=(
        KeySpec(
            ("RW", "access", "update", "variable_flags"), 1, notes="RW and ACCESS due to the optional `GET` argument"
        ),
    ),
    get_keys=lambda argv: [(1, SET_GET_KEY if any(lower(arg) == b"get" for arg in argv[3:]) else SET_KEY)],
)
def set_(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    value = argv[2]
    if len(argv) == 3:  # the common case: no options
        ks = c.keyspace
        ks.set(key, value)
        if ks.events is not None:
            ks.events.emit(STRING, b"set", key)
        c.reply.out.append(OK)
        return None
    cond = b""
    want_get = keep_ttl = False
    unit = b""
    raw_expire = b""
    i = 3
    while i < len(argv):
        opt = lower(argv[i])
        if opt in (b"nx", b"xx") and cond in (b"", opt):
            cond = opt
        elif opt == b"get":
            want_get = True
        elif opt == b"keepttl" and not unit:
            keep_ttl = True
        elif opt in (b"ex", b"px", b"exat", b"pxat") and not keep_ttl and unit in (b"", opt) and i + 1 < len(argv):
            unit = opt
            i += 1
            raw_expire = bytes(argv[i])
        else:
            raise CommandError(errors.SYNTAX)
        i += 1
    expire_at = _expire_at(c, unit, raw_expire, "set") if unit else 0
    ks = c.keyspace
    entry = ks.lookup(key)
    if keep_ttl and entry is not None:
        expire_at = entry.expire_at
    if (cond == b"nx" and entry is not None) or (cond == b"xx" and entry is None):
        if entry is not None:
            ks.access(entry)  # Redis's SET looks the key up for the write: an access, even if nothing is set
        if want_get:
            return _reply_value(c, ks.get(key))
        c.reply.null()
        return None
    old = ks.get(key) if want_get else None
    ks.set(key, value, expire_at)
    notify(ks, STRING, b"set", key)
    if unit:
        notify(ks, GENERIC, b"expire", key)
    if want_get:
        return _reply_value(c, old)
    c.reply.ok()
    return None


@command(
    "setnx",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Set the string value of a key only when the key doesn't exist.",
    usage="key value",
    key_flags="OW insert",
)
def setnx(c: Client, argv: list[Any]) -> None:
    key = bytes(argv[1])
    if c.keyspace.lookup_write(key) is not None:
        c.reply.integer(0)
        return
    c.keyspace.set(key, argv[2])
    notify(c.keyspace, STRING, b"set", key)
    c.reply.integer(1)


def _setex(c: Client, argv: list[Any], unit: bytes, name: str) -> None:
    expire_at = _expire_at(c, unit, bytes(argv[2]), name)
    key = bytes(argv[1])
    c.keyspace.set(key, argv[3], expire_at)
    notify(c.keyspace, STRING, b"set", key)
    notify(c.keyspace, GENERIC, b"expire", key)
    c.reply.ok()


@command(
    "setex",
    4,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="2.0.0",
    summary="Sets the string value and expiration time of a key.",
    usage="key seconds value",
    key_flags="OW update",
)
def setex(c: Client, argv: list[Any]) -> None:
    _setex(c, argv, b"ex", "setex")


@command(
    "psetex",
    4,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    summary="Sets both string value and expiration time in milliseconds of a key.",
    usage="key milliseconds value",
    key_flags="OW update",
)
def psetex(c: Client, argv: list[Any]) -> None:
    _setex(c, argv, b"px", "psetex")


@command(
    "getset",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Returns the previous string value of a key after setting it to a new value.",
    usage="key value",
    key_flags="RW access update",
    doc_flags="deprecated",
    deprecated_since="6.2.0",
    replaced_by="`SET` with the `!GET` argument",
)
def getset(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    old = c.keyspace.get(key)
    c.keyspace.set(key, argv[2])
    notify(c.keyspace, STRING, b"set", key)
    return _reply_value(c, old)


@command(
    "getdel",
    2,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="6.2.0",
    summary="Returns the string value of a key after deleting the key.",
    usage="key",
    key_flags="RW access delete",
)
def getdel(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    value = c.keyspace.get(key)
    if value is not None:
        c.keyspace.delete(key)
        notify(c.keyspace, GENERIC, b"del", key)
    return _reply_value(c, value)


@command(
    "getex",
    -2,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="6.2.0",
    summary="Returns the string value of a key after setting its expiration time.",
    usage="key [EX seconds | PX milliseconds | EXAT unix-time-seconds | PXAT unix-time-milliseconds | PERSIST]",
    key_specs=(KeySpec(("RW", "access", "update"), 1, notes="RW and UPDATE because it changes the TTL"),),
)
def getex(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    unit = b""
    raw = b""
    persist = False
    i = 2
    while i < len(argv):
        opt = lower(argv[i])
        # As in Redis, an option may repeat (the last amount wins) but not meet another kind of expiry.
        if opt in (b"ex", b"px", b"exat", b"pxat") and unit in (b"", opt) and not persist and i + 1 < len(argv):
            unit = opt
            i += 1
            raw = bytes(argv[i])
        elif opt == b"persist" and not unit:
            persist = True
        else:
            raise CommandError(errors.SYNTAX)
        i += 1
    entry = c.keyspace.lookup_read(key)
    if entry is None:  # a missing key is a null before its expiry time is even looked at
        c.reply.null()
        return None
    expire_at = _expire_at(c, unit, raw, "getex") if unit else 0
    value = c.keyspace.value_of(key, entry)
    if unit or (persist and entry.expire_at):  # PERSIST of a key without a TTL changes (and logs) nothing
        deleted = unit and expire_at <= now_ms() and not c.keyspace.primary_expires
        c.keyspace.set_expire(key, expire_at)
        notify(c.keyspace, GENERIC, b"del" if deleted else b"expire" if unit else b"persist", key)
    return _reply_value(c, value)


@command(
    "mget",
    -2,
    f"{READONLY} {FAST}",
    (1, -1, 1),
    group=G,
    summary="Atomically returns the string values of one or more keys.",
    usage="key [key ...]",
    tips="request_policy:multi_shard",
    key_flags="RO access",
    complexity="O(N) where N is the number of keys to retrieve.",
)
def mget(c: Client, argv: list[Any]) -> Any:
    values = [c.keyspace.get(bytes(k)) for k in argv[1:]]
    if all(v is None or isinstance(v, bytes | bytearray | memoryview) for v in values):
        c.reply.bulk_array(values)
        return None

    async def finish() -> None:
        # Cold values are read concurrently; the reply goes out once all are here.
        import asyncio

        pending = [v if not isinstance(v, bytes | bytearray | memoryview) and v is not None else None for v in values]
        loaded = await asyncio.gather(*(p for p in pending if p is not None))
        it = iter(loaded)
        c.reply.bulk_array([next(it) if p is not None else v for v, p in zip(values, pending, strict=True)])

    return finish()


@command(
    "mset",
    -3,
    f"{WRITE} {DENYOOM}",
    (1, -1, 2),
    group=G,
    since="1.0.1",
    summary="Atomically creates or modifies the string values of one or more keys.",
    usage="key value [key value ...]",
    tips="request_policy:multi_shard response_policy:all_succeeded",
    key_flags="OW update",
    complexity="O(N) where N is the number of keys to set.",
)
def mset(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 == 0:
        raise CommandError(errors.wrong_arity("mset"))
    pairs = [(bytes(argv[i]), argv[i + 1]) for i in range(1, len(argv), 2)]
    set_all(c, pairs)
    c.reply.ok()


def set_all(c: Client, pairs: list[tuple[bytes, Any]]) -> None:
    """MSET's, MSETNX's and KVD.SETFROM's writes, all of them: whether there is room for them was decided before
    the command ran (``Keyspace.out_of_memory``, and KVD.SETFROM's ``check_room``)."""
    ks = c.keyspace
    for key, value in pairs:
        ks.set(key, value)
        notify(ks, STRING, b"set", key)  # after each key, as Redis: new k1, set k1, new k2, set k2


@command(
    "msetnx",
    -3,
    f"{WRITE} {DENYOOM}",
    (1, -1, 2),
    group=G,
    since="1.0.1",
    summary="Atomically modifies the string values of one or more keys only when all keys don't exist.",
    usage="key value [key value ...]",
    tips="request_policy:multi_shard response_policy:agg_min",
    key_flags="OW insert",
    complexity="O(N) where N is the number of keys to set.",
)
def msetnx(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 == 0:
        raise CommandError(errors.wrong_arity("msetnx"))
    keys = [bytes(argv[i]) for i in range(1, len(argv), 2)]
    if any(c.keyspace.lookup_write(k) is not None for k in keys):  # up to the first that exists, as Redis
        c.reply.integer(0)
        return
    set_all(c, [(key, argv[i]) for i, key in zip(range(2, len(argv), 2), keys, strict=True)])
    c.reply.integer(1)


@command(
    "strlen",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.2.0",
    summary="Returns the length of a string value.",
    usage="key",
    key_flags="RO",
)
def strlen(c: Client, argv: list[Any]) -> None:
    entry = c.keyspace.lookup_read(bytes(argv[1]))
    if entry is not None:
        c.keyspace.access(entry)  # Redis's STRLEN reads the key: it counts as an access
    c.reply.integer(entry.value_len if entry is not None else 0)  # a cold one's from the index: no disk read


@command(
    "getrange",
    4,
    READONLY,
    (1, 1, 1),
    group=G,
    since="2.4.0",
    complexity="O(N) where N is the length of the returned string. The complexity is ultimately determined by the "
    "returned length, but because creating a substring from an existing string is very cheap, it can be "
    "considered O(1) for small strings.",
    summary="Returns a substring of the string stored at a key.",
    usage="key start end",
    key_flags="RO access",
)
def getrange(c: Client, argv: list[Any]) -> Any:
    start = parse_int(argv[2])
    end = parse_int(argv[3])
    value = c.keyspace.get(bytes(argv[1]))

    def reply(data: Any) -> None:
        data = data if data is not None else b""
        n = len(data)
        s, e = start, end
        if s < 0 and e < 0 and s > e:
            c.reply.bulk(b"")
            return
        if s < 0:
            s = max(n + s, 0)
        if e < 0:
            e = max(n + e, 0)
        e = min(e, n - 1)
        if s > e or n == 0:
            c.reply.bulk(b"")
            return
        c.reply.bulk(memoryview(data)[s : e + 1])

    return then(value, reply)


@command(
    "substr",
    4,
    READONLY,
    (1, 1, 1),
    group=G,
    since="1.0.0",
    complexity="O(N) where N is the length of the returned string. The complexity is ultimately determined by the "
    "returned length, but because creating a substring from an existing string is very cheap, it can be "
    "considered O(1) for small strings.",
    summary="Returns a substring from a string value (GETRANGE's name before Redis 2.0).",
    usage="key start end",
    key_flags="RO access",
    doc_flags="deprecated",
    deprecated_since="2.0.0",
    replaced_by="`GETRANGE`",
)
def substr(c: Client, argv: list[Any]) -> Any:
    return getrange(c, argv)


@command(
    "append",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.0.0",
    summary="Appends a string to the value of a key. Creates the key if it doesn't exist.",
    usage="key value",
    key_flags="RW insert",
    complexity="O(1). The amortized time complexity is O(1) assuming the appended value is small and the already "
    "present value is of any size, since the dynamic string library used by Redis will double the free "
    "space available on every reallocation.",
)
def append(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    suffix = bytes(argv[2])

    def store(old: Value | None, deadline: int) -> None:
        if old is None:
            new: Value = suffix  # a new key holds the argument itself, as in Redis (OBJECT ENCODING int/embstr)
        else:
            _check_length(c, len(old) + len(suffix))
            new = bytearray(old)  # built in place, as Redis's raw strings are (OBJECT ENCODING)
            new += suffix
        c.keyspace.set(key, new, deadline, history=KEPT)  # the read above counted the access
        notify(c.keyspace, STRING, b"append", key)
        c.reply.integer(len(new))

    return with_current(c, key, store)


def _check_length(c: Client, total: int) -> None:
    """Redis's ``checkStringLength``: a value built by APPEND or SETRANGE may not pass proto-max-bulk-len."""
    if total > c.server.settings.proto_max_bulk_len:
        raise CommandError(errors.STRING_TOO_LONG)


@command(
    "setrange",
    4,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="2.2.0",
    summary="Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.",
    usage="key offset value",
    key_flags="RW update",
    complexity="O(1), not counting the time taken to copy the new string in place. Usually, this string is very "
    "small so the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length of "
    "the value argument.",
)
def setrange(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    offset = parse_int(argv[2])
    if offset < 0:
        raise CommandError(errors.OFFSET_OUT_OF_RANGE)
    patch = bytes(argv[3])

    def store(old: Value | None, deadline: int) -> None:
        if not patch:  # nothing to write: the length as it is (0 for a missing key, which is not created)
            c.reply.integer(len(old) if old is not None else 0)
            return
        _check_length(c, offset + len(patch))
        new = bytearray(old if old is not None else b"")  # a new object: the stored one may still be in flight
        if len(new) < offset:
            new += bytes(offset - len(new))  # zero-padded, as Redis's sdsgrowzero
        new[offset : offset + len(patch)] = patch
        c.keyspace.set(key, new, deadline, history=KEPT)  # a bytearray: Redis's raw encoding (OBJECT ENCODING)
        notify(c.keyspace, STRING, b"setrange", key)
        c.reply.integer(len(new))

    return with_current(c, key, store)


def _incr(c: Client, key: bytes, delta: int) -> Any:
    def store(old: Value | None, deadline: int) -> None:
        base = parse_int(old) if old is not None else 0
        new = base + delta
        if not -(2**63) <= new <= LLONG_MAX:
            raise CommandError("ERR increment or decrement would overflow")
        c.keyspace.set(key, b"%d" % new, deadline, history=KEPT)
        notify(c.keyspace, STRING, b"incrby", key)
        c.reply.integer(new)

    return with_current(c, key, store)


@command(
    "incr",
    2,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Increments the integer value of a key by one.",
    usage="key",
    key_flags="RW access update",
)
def incr(c: Client, argv: list[Any]) -> Any:
    return _incr(c, bytes(argv[1]), 1)


@command(
    "decr",
    2,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Decrements the integer value of a key by one.",
    usage="key",
    key_flags="RW access update",
)
def decr(c: Client, argv: list[Any]) -> Any:
    return _incr(c, bytes(argv[1]), -1)


@command(
    "incrby",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Increments the integer value of a key by a number.",
    usage="key increment",
    key_flags="RW access update",
)
def incrby(c: Client, argv: list[Any]) -> Any:
    return _incr(c, bytes(argv[1]), parse_int(argv[2]))


@command(
    "incrbyfloat",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    summary="Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't "
    "exist.",
    usage="key increment",
    key_flags="RW access update",
)
def incrbyfloat(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])

    def store(old: Value | None, deadline: int) -> None:
        # Redis's order: the stored value is checked before the increment (longdouble.py has the arithmetic).
        base = longdouble.parse(bytes(old)) if old is not None else Fraction(0)
        increment = longdouble.parse(bytes(argv[2]))
        if base is None or increment is None:
            raise CommandError(errors.NOT_FLOAT)
        total = longdouble.add(base, increment)
        if not isinstance(total, Fraction):
            raise CommandError("ERR increment would produce NaN or Infinity")
        new = longdouble.format_human(total)
        c.keyspace.set(key, new, deadline, history=KEPT)
        notify(c.keyspace, STRING, b"incrbyfloat", key)
        c.reply.bulk(new)

    return with_current(c, key, store)


@command(
    "decrby",
    3,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Decrements a number from the integer value of a key.",
    usage="key decrement",
    key_flags="RW access update",
)
def decrby(c: Client, argv: list[Any]) -> Any:
    decrement = parse_int(argv[2])
    if decrement == -(2**63):  # its negation is not a 64-bit integer; Redis refuses it before the lookup
        raise CommandError("ERR decrement would overflow")
    return _incr(c, bytes(argv[1]), -decrement)
