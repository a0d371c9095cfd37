"""Generic key commands: existence, deletion, TTLs, iteration (Redis ``db.c`` and ``expire.c``).

SCAN uses the keyspace's stable sequence cursor (``kvd/store/scan.py``), so a full iteration returns every key
that existed throughout exactly once, even under concurrent writes. KEYS and SCAN MATCH use Redis's glob rules
(``kvd/store/glob.py``), with its cap on backtracking.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from kvd.notify import GENERIC, NEW, notify
from kvd.persist.dump import PayloadError, dump_payload, load_payload
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.glob import glob_match
from kvd.store.keyspace import FRESH, Value, now_ms

from .args import LLONG_MAX, c_word, check_db_index, lower, parse_int
from .registry import ASKING, DENYOOM, FAST, READONLY, WRITE, KeySpec, command
from .values import then, with_current

if TYPE_CHECKING:
    from kvd.connection import Client

G = "generic"
TYPES = (b"string", b"list", b"set", b"zset", b"hash", b"stream")


@command(
    "del",
    -2,
    WRITE,
    (1, -1, 1),
    group=G,
    complexity="O(N) where N is the number of keys that will be removed. When a key to remove holds a value other "
    "than a string, the individual complexity for this key is O(M) where M is the number of elements in "
    "the list, set, sorted set or hash. Removing a single key that holds a string value is O(1).",
    summary="Deletes one or more keys.",
    usage="key [key ...]",
    tips="request_policy:multi_shard response_policy:agg_sum",
    key_flags="RM delete",
)
def del_(c: Client, argv: list[Any]) -> None:
    c.reply.integer(_delete(c, argv[1:]))


def _delete(c: Client, keys: list[Any]) -> int:
    ks = c.keyspace
    deleted = 0
    for raw in keys:
        key = bytes(raw)
        if ks.delete(key):
            deleted += 1
            notify(ks, GENERIC, b"del", key)
    return deleted


@command(
    "unlink",
    -2,
    f"{WRITE} {FAST}",
    (1, -1, 1),
    group=G,
    since="4.0.0",
    complexity="O(1) for each key removed regardless of its size. Then the command does O(N) work in a different "
    "thread in order to reclaim memory, where N is the number of allocations the deleted objects where "
    "composed of.",
    summary="Asynchronously deletes one or more keys.",
    usage="key [key ...]",
    tips="request_policy:multi_shard response_policy:agg_sum",
    key_flags="RM delete",
)
def unlink(c: Client, argv: list[Any]) -> None:
    # Freeing a value is a refcount drop in CPython; there is no slow destructor to move off the loop.
    c.reply.integer(_delete(c, argv[1:]))


@command(
    "exists",
    -2,
    f"{READONLY} {FAST}",
    (1, -1, 1),
    group=G,
    since="1.0.0",
    complexity="O(N) where N is the number of keys to check.",
    summary="Determines whether one or more keys exist.",
    usage="key [key ...]",
    tips="request_policy:multi_shard response_policy:agg_sum",
    key_flags="RO",
)
def exists(c: Client, argv: list[Any]) -> None:
    now = now_ms()
    c.reply.integer(sum(c.keyspace.lookup_read(bytes(k), now) is not None for k in argv[1:]))


@command(
    "type",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Determines the type of value stored at a key.",
    usage="key",
    key_flags="RO",
)
def type_(c: Client, argv: list[Any]) -> None:
    c.reply.raw(b"+string\r\n" if c.keyspace.lookup_read(bytes(argv[1])) is not None else b"+none\r\n")


@command(
    "touch",
    -2,
    f"{READONLY} {FAST}",
    (1, -1, 1),
    group=G,
    since="3.2.1",
    complexity="O(N) where N is the number of keys that will be touched.",
    summary="Returns the number of existing keys out of those specified after updating the time they were last "
    "accessed.",
    usage="key [key ...]",
    tips="request_policy:multi_shard response_policy:agg_sum",
    key_flags="RO",
)
def touch(c: Client, argv: list[Any]) -> None:
    # A connector can keep the chunks of a prefix it is about to reuse from being the next ones demoted.
    c.reply.integer(sum(c.keyspace.touch(bytes(k)) for k in argv[1:]))


def _rename(c: Client, argv: list[Any], nx: bool) -> Any:
    src, dst = bytes(argv[1]), bytes(argv[2])
    ks = c.keyspace
    if src == dst:  # nothing moves, but a missing key is still an error
        if ks.lookup(src) is None:
            raise CommandError(errors.NO_SUCH_KEY)
        c.reply.integer(0) if nx else c.reply.ok()
        return None

    def move(value: Value | None, deadline: int) -> None:
        if value is None:
            raise CommandError(errors.NO_SUCH_KEY)
        replaced = ks.lookup(dst) is not None
        if nx and replaced:
            c.reply.integer(0)
            return
        ks.rename(src, dst, value, deadline)  # the value object moves; the log has dst's record first
        if replaced:  # Redis deletes the old dst and adds it anew
            notify(ks, NEW, b"new", dst)
        notify(ks, GENERIC, b"rename_from", src)
        notify(ks, GENERIC, b"rename_to", dst)
        c.reply.integer(1) if nx else c.reply.ok()

    return with_current(c, src, move)


@command(
    "rename",
    3,
    WRITE,
    (1, 2, 1),
    group=G,
    summary="Renames a key and overwrites the destination.",
    usage="key newkey",
    key_specs=(KeySpec(("RW", "access", "delete"), 1), KeySpec(("OW", "update"), 2)),
)
def rename(c: Client, argv: list[Any]) -> Any:
    return _rename(c, argv, nx=False)


@command(
    "renamenx",
    3,
    f"{WRITE} {FAST}",
    (1, 2, 1),
    group=G,
    summary="Renames a key only when the target key name doesn't exist.",
    usage="key newkey",
    key_specs=(KeySpec(("RW", "access", "delete"), 1), KeySpec(("OW", "insert"), 2)),
)
def renamenx(c: Client, argv: list[Any]) -> Any:
    return _rename(c, argv, nx=True)


@command(
    "copy",
    -3,
    f"{WRITE} {DENYOOM}",
    (1, 2, 1),
    group=G,
    since="6.2.0",
    complexity="O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
    summary="Copies the value of a key to a new key.",
    usage="source destination [DB destination-db] [REPLACE]",
    key_specs=(KeySpec(("RO", "access"), 1), KeySpec(("OW", "update"), 2)),
)
def copy(c: Client, argv: list[Any]) -> Any:
    src, dst = bytes(argv[1]), bytes(argv[2])
    replace = False
    i = 3
    while i < len(argv):
        opt = lower(argv[i])
        if opt == b"replace":
            replace = True
        elif opt == b"db" and i + 1 < len(argv):
            check_db_index(argv[i + 1])
            i += 1
        else:
            raise CommandError(errors.SYNTAX)
        i += 1
    if src == dst:
        raise CommandError(errors.SAME_OBJECT)
    ks = c.keyspace

    def copy_to(value: Value | None, deadline: int) -> None:
        replaced = ks.lookup(dst) is not None
        if value is None or (replaced and not replace):
            c.reply.integer(0)
            return
        # Values are never changed in place (commands that derive one build a new object), so both keys can
        # hold the same object; the RAM tier charges it to each, as if it were copied.
        ks.set(dst, value, deadline, history=FRESH)  # a copy: a new object, with no access history
        if replaced:  # as RENAME: the old dst is deleted and the key added anew
            notify(ks, NEW, b"new", dst)
        notify(ks, GENERIC, b"copy_to", dst)
        c.reply.integer(1)

    return with_current(c, src, copy_to, read=True)  # Redis reads COPY's source: a hit or a miss in INFO


@command(
    "dump",
    2,
    READONLY,
    (1, 1, 1),
    group=G,
    since="2.6.0",
    complexity="O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis "
    "objects composing the value and M their average size. For small string values the time complexity is "
    "thus O(1)+O(1*M) where M is small, so simply O(1).",
    summary="Returns a serialized representation of the value stored at a key.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO access",
)
def dump(c: Client, argv: list[Any]) -> Any:
    """Redis's payload for the value (kvd/persist/dump.py), which RESTORE in kvd or Redis turns back into it."""
    return then(
        c.keyspace.get(bytes(argv[1])), lambda v: c.reply.null() if v is None else c.reply.bulk(dump_payload(v))
    )


# Redis's words for RESTORE and RESTORE-ASKING (COMMAND DOCS).
_RESTORE_COMPLEXITY = (
    "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number "
    "of Redis objects composing the value and M their average size. For small string values the time complexity "
    "is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is "
    "O(N*M*log(N)) because inserting values into sorted sets is O(log(N))."
)


@command(
    "restore-asking",
    -4,
    f"{WRITE} {DENYOOM} {ASKING}",
    (1, 1, 1),
    group="server",
    since="3.0.0",
    complexity=_RESTORE_COMPLEXITY,
    summary="An internal command for migrating keys in a cluster",
    usage="key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]",
    key_flags="OW update",
    doc_flags="syscmd",
)  # what a cluster's MIGRATE sends; without a cluster, RESTORE itself (as in Redis)
@command(
    "restore",
    -4,
    f"{WRITE} {DENYOOM}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    complexity=_RESTORE_COMPLEXITY,
    summary="Creates a key from the serialized representation of a value.",
    usage="key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]",
    key_flags="OW update",
)
def restore(c: Client, argv: list[Any]) -> None:
    """A key from a DUMP payload (kvd's or Redis's), with Redis's checks in Redis's order. IDLETIME sets what
    OBJECT IDLETIME answers under an LRU policy and FREQ the access counter under LFU (each is ignored under the
    other policy, as in Redis); the key itself joins the recent end of kvd's exact LRU list."""
    key = bytes(argv[1])
    replace = absttl = False
    idle = freq = -1
    i = 4
    while i < len(argv):
        opt, more = lower(argv[i]), len(argv) - i - 1
        if opt == b"replace":
            replace = True
        elif opt == b"absttl":
            absttl = True
        elif opt == b"idletime" and more >= 1 and freq == -1:
            i += 1
            idle = parse_int(argv[i])
            if idle < 0:
                raise CommandError("ERR Invalid IDLETIME value, must be >= 0")
        elif opt == b"freq" and more >= 1 and idle == -1:
            i += 1
            freq = parse_int(argv[i])
            if not 0 <= freq <= 255:
                raise CommandError("ERR Invalid FREQ value, must be >= 0 and <= 255")
        else:
            raise CommandError(errors.SYNTAX)
        i += 1
    ks = c.keyspace
    existed = ks.lookup(key) is not None
    if existed and not replace:
        raise CommandError("BUSYKEY Target key name already exists.")
    ttl = parse_int(argv[2])
    if ttl < 0:
        raise CommandError("ERR Invalid TTL value, must be >= 0")
    try:
        value = load_payload(argv[3])
    except PayloadError as exc:
        raise CommandError(exc.message) from None
    deadline = (ttl if absttl else now_ms() + ttl) if ttl else 0
    # A relative TTL past 2**63 - 1 ms wraps negative in Redis (ttl += mstime()): the key counts as expired.
    if deadline and (deadline <= now_ms() or deadline >= 1 << 63):  # expired: the old key goes, no new one comes
        if existed and ks.delete(key):
            notify(ks, GENERIC, b"del", key)
        c.reply.ok()
        return
    ks.set(key, value, deadline, history=FRESH)
    ks.set_access(key, idle, freq)
    if existed:  # Redis deletes the old key and adds it anew
        notify(ks, NEW, b"new", key)
    notify(ks, GENERIC, b"restore", key)
    c.reply.ok()


def _ttl(c: Client, argv: list[Any], ms: bool, absolute: bool = False) -> None:
    entry = c.keyspace.lookup_read(bytes(argv[1]))
    if entry is None:
        c.reply.integer(-2)
    elif not entry.expire_at:
        c.reply.integer(-1)
    elif absolute:
        c.reply.integer(entry.expire_at if ms else (entry.expire_at + 500) // 1000)
    else:
        left = max(entry.expire_at - now_ms(), 0)
        c.reply.integer(left if ms else (left + 500) // 1000)


@command(
    "ttl",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Returns the expiration time in seconds of a key.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO access",
)
def ttl(c: Client, argv: list[Any]) -> None:
    _ttl(c, argv, ms=False)


@command(
    "pttl",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    summary="Returns the expiration time in milliseconds of a key.",
    usage="key",
    tips="nondeterministic_output",
    key_flags="RO access",
)
def pttl(c: Client, argv: list[Any]) -> None:
    _ttl(c, argv, ms=True)


@command(
    "expiretime",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="7.0.0",
    summary="Returns the expiration time of a key as a Unix timestamp.",
    usage="key",
    key_flags="RO access",
)
def expiretime(c: Client, argv: list[Any]) -> None:
    _ttl(c, argv, ms=False, absolute=True)


@command(
    "pexpiretime",
    2,
    f"{READONLY} {FAST}",
    (1, 1, 1),
    group=G,
    since="7.0.0",
    summary="Returns the expiration time of a key as a Unix milliseconds timestamp.",
    usage="key",
    key_flags="RO access",
)
def pexpiretime(c: Client, argv: list[Any]) -> None:
    _ttl(c, argv, ms=True, absolute=True)


def _expire(c: Client, argv: list[Any], name: str, unit_ms: int, absolute: bool) -> None:
    key = bytes(argv[1])
    nx = xx = gt = lt = False  # the options are checked before the amount, so their errors come first
    for raw in argv[3:]:
        opt = lower(raw)
        if opt == b"nx":
            nx = True
        elif opt == b"xx":
            xx = True
        elif opt == b"gt":
            gt = True
        elif opt == b"lt":
            lt = True
        else:
            raise CommandError(f"ERR Unsupported option {errors.c_string(raw)}")
    if nx and (xx or gt or lt):
        raise CommandError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if gt and lt:
        raise CommandError("ERR GT and LT options at the same time are not compatible")
    amount = parse_int(argv[2])
    if unit_ms == 1000 and not -(LLONG_MAX // 1000) <= amount <= LLONG_MAX // 1000:
        raise CommandError(errors.invalid_expire(name))
    when = amount * unit_ms
    if not absolute:
        base = now_ms()
        if when > LLONG_MAX - base:
            raise CommandError(errors.invalid_expire(name))
        when += base
    entry = c.keyspace.lookup_write(key)
    if entry is None:
        c.reply.integer(0)
        return
    current = entry.expire_at  # 0 = no TTL, which GT/LT treat as infinite
    if (
        (nx and current)
        or (xx and not current)
        or (gt and (not current or when <= current))
        or (lt and current and when >= current)
    ):
        c.reply.integer(0)
        return
    c.keyspace.set_expire(key, max(when, 1))  # a deadline already passed deletes the key (not on a replica)
    deleted = when <= now_ms() and not c.keyspace.primary_expires
    notify(c.keyspace, GENERIC, b"del" if deleted else b"expire", key)
    c.reply.integer(1)


@command(
    "expire",
    -3,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Sets the expiration time of a key in seconds.",
    usage="key seconds [NX | XX | GT | LT]",
    key_flags="RW update",
)
def expire(c: Client, argv: list[Any]) -> None:
    _expire(c, argv, "expire", 1000, absolute=False)


@command(
    "pexpire",
    -3,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    summary="Sets the expiration time of a key in milliseconds.",
    usage="key milliseconds [NX | XX | GT | LT]",
    key_flags="RW update",
)
def pexpire(c: Client, argv: list[Any]) -> None:
    _expire(c, argv, "pexpire", 1, absolute=False)


@command(
    "expireat",
    -3,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="1.2.0",
    summary="Sets the expiration time of a key to a Unix timestamp.",
    usage="key unix-time-seconds [NX | XX | GT | LT]",
    key_flags="RW update",
)
def expireat(c: Client, argv: list[Any]) -> None:
    _expire(c, argv, "expireat", 1000, absolute=True)


@command(
    "pexpireat",
    -3,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.6.0",
    summary="Sets the expiration time of a key to a Unix milliseconds timestamp.",
    usage="key unix-time-milliseconds [NX | XX | GT | LT]",
    key_flags="RW update",
)
def pexpireat(c: Client, argv: list[Any]) -> None:
    _expire(c, argv, "pexpireat", 1, absolute=True)


@command(
    "persist",
    2,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.2.0",
    summary="Removes the expiration time of a key.",
    usage="key",
    key_flags="RW update",
)
def persist(c: Client, argv: list[Any]) -> None:
    key = bytes(argv[1])
    entry = c.keyspace.lookup_write(key)
    if entry is None or not entry.expire_at:
        c.reply.integer(0)
        return
    c.keyspace.set_expire(key, 0)
    notify(c.keyspace, GENERIC, b"persist", key)
    c.reply.integer(1)


@command(
    "keys",
    2,
    READONLY,
    (0, 0, 0),
    group=G,
    complexity="O(N) with N being the number of keys in the database, under the assumption that the key names in the "
    "database and the given pattern have limited length.",
    summary="Returns all key names that match a pattern.",
    usage="pattern",
    tips="request_policy:all_shards nondeterministic_output_order",
)
def keys(c: Client, argv: list[Any]) -> None:
    pattern = bytes(argv[1])
    found = c.keyspace.live_keys() if pattern == b"*" else [k for k in c.keyspace.live_keys() if glob_match(pattern, k)]
    c.reply.bulk_array(found)


_CURSOR = re.compile(rb"(?:[+-]?[0-9]+)?")


def _parse_cursor(raw: bytes | bytearray) -> int:
    """A cursor as Redis reads it (``parseScanCursorOrReply``: ``strtoul`` on a C string): decimal digits with an
    optional sign, a negative one wrapping modulo 2**64, the empty string as 0; anything else, a leading space
    or a value past 2**64 - 1 is ``invalid cursor``. kvd's own cursors are plain digits; the rest is accepted
    so that any cursor Redis takes is taken here too."""
    text = c_word(raw)
    digits = text.lstrip(b"+-").lstrip(b"0")
    if not _CURSOR.fullmatch(text) or len(digits) > 20:  # past 2**64 - 1 (and CPython's limit on long int text)
        raise CommandError(errors.INVALID_CURSOR)
    value = -int(digits or b"0") if text[:1] == b"-" else int(digits or b"0")
    if abs(value) >= 2**64:
        raise CommandError(errors.INVALID_CURSOR)
    return value % 2**64


@command(
    "scan",
    -2,
    READONLY,
    (0, 0, 0),
    group=G,
    since="2.8.0",
    complexity="O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to "
    "return back to 0. N is the number of elements inside the collection.",
    summary="Iterates over the key names in the database.",
    usage="cursor [MATCH pattern] [COUNT count] [TYPE type]",
    tips="nondeterministic_output request_policy:special",
)
def scan(c: Client, argv: list[Any]) -> None:
    cursor = _parse_cursor(argv[1])
    pattern: bytes | None = None
    count = 10
    type_filter: bytes | None = None
    i = 2
    while i < len(argv):
        opt = lower(argv[i])
        if i + 1 >= len(argv):
            raise CommandError(errors.SYNTAX)
        if opt == b"match":
            pattern = bytes(argv[i + 1])
        elif opt == b"count":
            count = parse_int(argv[i + 1])
            if count < 1:
                raise CommandError(errors.SYNTAX)
        elif opt == b"type":
            type_filter = lower(argv[i + 1])
        else:
            raise CommandError(errors.SYNTAX)
        i += 2
    next_cursor, found = c.keyspace.scan_page(cursor, count)
    if pattern is not None and pattern != b"*":
        found = [k for k in found if glob_match(pattern, k)]
    if type_filter is not None:
        c.keyspace.stats.keyspace_hits += len(found)  # Redis looks each one up to learn its type: a hit each
        if type_filter != b"string":
            found = []  # every kvd value is a string (Redis 7.0 also answers unknown type names with nothing)
    c.reply.array(2)
    c.reply.bulk(b"%d" % next_cursor)
    c.reply.bulk_array(found)


@command(
    "randomkey",
    1,
    READONLY,
    (0, 0, 0),
    group=G,
    summary="Returns a random key name from the database.",
    tips="request_policy:all_shards nondeterministic_output",
)
def randomkey(c: Client, argv: list[Any]) -> None:
    key = c.keyspace.random_key()
    if key is None:
        c.reply.null()
    else:
        c.reply.bulk(key)


@command(
    "dbsize",
    1,
    f"{READONLY} {FAST}",
    (0, 0, 0),
    group="server",
    summary="Returns the number of keys in the database.",
    tips="request_policy:all_shards response_policy:agg_sum",
)
def dbsize(c: Client, argv: list[Any]) -> None:
    c.reply.integer(len(c.keyspace))


def _flush(c: Client, argv: list[Any]) -> None:
    if len(argv) > 2 or (len(argv) == 2 and lower(argv[1]) not in (b"async", b"sync")):
        raise CommandError(errors.SYNTAX)
    c.keyspace.flush()
    c.reply.ok()


@command(
    "flushall",
    -1,
    WRITE,
    (0, 0, 0),
    group="server",
    complexity="O(N) where N is the total number of keys in all databases",
    summary="Removes all keys from all databases, in RAM and on disk.",
    usage="[ASYNC | SYNC]",
    tips="request_policy:all_shards response_policy:all_succeeded",
)
def flushall(c: Client, argv: list[Any]) -> None:
    _flush(c, argv)


@command(
    "flushdb",
    -1,
    WRITE,
    (0, 0, 0),
    group="server",
    complexity="O(N) where N is the number of keys in the selected database",
    summary="Remove all keys from the current database, in RAM and on disk.",
    usage="[ASYNC | SYNC]",
    tips="request_policy:all_shards response_policy:all_succeeded",
)
def flushdb(c: Client, argv: list[Any]) -> None:
    _flush(c, argv)


# -- MOVE and SWAPDB: kvd has one database, so they can only say what Redis says of database 0 ------------------


def _int_index(raw: bytes | bytearray, message: str = errors.NOT_INTEGER) -> int:
    """Redis's ``getIntFromObjectOrReply``: a C int, ``message`` for anything else (its own wording by default)."""
    index = parse_int(raw, message)
    if not -(2**31) <= index < 2**31:
        raise CommandError(
            message
            if message != errors.NOT_INTEGER
            else "ERR value is out of range, value must between -2147483648 and 2147483647"
        )
    return index


@command(
    "move",
    3,
    f"{WRITE} {FAST}",
    (1, 1, 1),
    group=G,
    summary="Moves a key to another database.",
    usage="key db",
    key_flags="RW access update",
)
def move(c: Client, argv: list[Any]) -> None:
    if _int_index(argv[2]) != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)
    raise CommandError(errors.SAME_OBJECT)  # database 0 to database 0, checked before the key, as Redis does


@command(
    "swapdb",
    3,
    f"{WRITE} {FAST}",
    group="server",
    since="4.0.0",
    complexity="O(N) where N is the count of clients watching or blocking on keys from both databases.",
    summary="Swaps two Redis databases.",
    usage="index1 index2",
)
def swapdb(c: Client, argv: list[Any]) -> None:
    first = _int_index(argv[1], "ERR invalid first DB index")
    second = _int_index(argv[2], "ERR invalid second DB index")
    if first != 0 or second != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)
    c.reply.ok()  # database 0 with itself: nothing moves, no WATCH is disturbed (Redis returns before both)
