"""DEBUG: Redis's tools for testing clients and servers (``debug.c``), for what kvd has of them.

Off by default, as in Redis 7: ``enable-debug-command`` is ``no`` (every DEBUG is refused with Redis's words),
``local`` (clients from 127.0.0.1 or ::1, as Redis's ``islocalClient``) or ``yes``, set at start-up only. The
check runs where Redis runs it: before NOAUTH, before MULTI queues the command and before the RESP2 pub/sub
context's refusal (``Client._may_run_protected``).

What each subcommand does here:

* ``DIGEST`` and ``DIGEST-VALUE key ...``: Redis's SHA-1 signatures, byte for byte (a test compares them with
  redis-server's for the same keys), so a dataset copied between kvd and Redis, or to a replica, can be checked
  with one command on each side. DIGEST reads a snapshot (``kvd/store/snapshot.py``): the dataset of one
  instant, cold values read from their segments without entering the RAM tier, other clients served meanwhile
  (Redis blocks for the whole walk); values of 1 MiB and more are hashed in a worker thread (hashlib releases
  the GIL) while the loop goes on. Inside EXEC, with every value in RAM, all of it runs at once, so the
  transaction stays whole. Keys past their deadline are left out, where Redis includes those it has not
  reclaimed yet; a client that disconnects stops its digest.
* ``OBJECT key``: Redis's line. ``encoding``, ``refcount`` and ``lru_seconds_idle`` are OBJECT's
  (``kvd/commands/objects.py``); ``serializedlength`` is the length of the value in kvd's RDB files (a length
  and the bytes: kvd writes neither integer nor LZF forms); ``lru`` is the RAM tier's clock of the last access,
  in seconds, on 24 bits as Redis's.
* ``POPULATE count [prefix] [size]``: keys ``prefix:N`` holding ``value:N`` (padded with zero bytes to ``size``);
  existing keys are left alone. Unlike Redis's, they are written as SETs are: to the log (the reply waits until
  it has them, and is -MISCONF if that fails) and to replicas, so a restart or a replica does not lose them;
  under ``noeviction`` (or a ``volatile-*`` policy with too few keys with a TTL to delete) they are refused
  together when they would pass ``maxmemory``, as MSET's keys are.
* ``SLEEP seconds``: stops the whole server, as Redis's, for stall and timeout tests.
* ``PROTOCOL type``, ``ERROR message``, ``LOG message``: a sample reply of each RESP type, an error reply, a line
  in the server's log.
* ``SET-ACTIVE-EXPIRE 0|1``: the 100 ms sweep of expired keys off or on; reads still drop expired keys.
* ``CHANGE-REPL-ID``: a new replication ID, so a replica's next PSYNC is a full resync.
* ``SEGFAULT``, ``PANIC``, ``ASSERT``: the server dies (SIGSEGV, or SIGABRT after its last log line) without
  shutting down: the way to check, with redis-cli, that what was acknowledged survives a crash.
* ``RESTART [ms]``, ``CRASH-AND-RECOVER [ms]``: the process executes itself again with the same command line,
  after a graceful stop (and CONFIG REWRITE of its settings file) or at once (``kvd/restart.py``): a restart,
  or a crash and a restart, without a supervisor; the new process recovers from the log.

Not here, because they concern what kvd does not have (RDB reloads as its persistence, AOF, jemalloc,
listpacks, quicklists, Lua, cluster links): they answer Redis's unknown-subcommand error, and HELP lists only
what is here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from hashlib import sha1
from typing import TYPE_CHECKING, Any

from kvd.persist.dump import encode_length
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.restart import cannot_restart, exec_again
from kvd.store.keyspace import OutOfMemory
from kvd.store.lru import LRU_CLOCK_MAX
from kvd.store.snapshot import Snapshot, take

from .args import c_word, option, parse_int, text
from .objects import refcount, with_encoding
from .registry import ADMIN, LOADING, STALE, command
from .server import rewrite_config

if TYPE_CHECKING:
    from kvd.connection import Client
    from kvd.protocol.reply import Buffer

log = logging.getLogger("kvd.server")

HELP = (
    ("ASSERT", "Crash by assertion failed."),
    ("CHANGE-REPL-ID", "Change the replication IDs of the instance.",
     "Dangerous: should be used only for testing the replication subsystem."),
    ("CRASH-AND-RECOVER [<milliseconds>]", "Hard crash and restart after a <milliseconds> delay (default 0)."),
    ("DIGEST", "Output a hex signature representing the current DB content."),
    ("DIGEST-VALUE <key> [<key> ...]", "Output a hex signature of the values of all the specified keys."),
    ("ERROR <string>", "Return a Redis protocol error with <string> as message. Useful for clients",
     "unit tests to simulate Redis errors."),
    ("LOG <message>", "Write <message> to the server log."),
    ("OBJECT <key>", "Show low level info about `key` and associated value."),
    ("PANIC", "Crash the server simulating a panic."),
    ("POPULATE <count> [<prefix>] [<size>]",
     "Create <count> string keys named key:<num>. If <prefix> is specified then",
     "it is used instead of the 'key' prefix. In kvd they are written to the log and to replicas, as SETs."),
    ("PROTOCOL <type>", "Reply with a test value of the specified type. <type> can be: string,",
     "integer, double, bignum, null, array, set, map, attrib, push, verbatim,", "true, false."),
    ("RESTART [<milliseconds>]",
     "Graceful restart: save config, db, restart after a <milliseconds> delay (default 0)."),
    ("SEGFAULT", "Crash the server with sigsegv."),
    ("SET-ACTIVE-EXPIRE <0|1>", "Setting it to 0 disables expiring keys in background when they are not",
     "accessed (otherwise the Redis behavior). Setting it to 1 reenables back the", "default."),
    ("SLEEP <seconds>", "Stop the server for <seconds>. Decimals allowed."),
)  # fmt: skip

_NOT_POSITIVE = "ERR value is out of range, must be positive"
_PROTOCOL_TYPES = "string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false"
_THREAD_HASH = 1 << 20  # values this long are hashed off the event loop
_YIELD_EVERY = 1024  # keys hashed between two turns of the event loop

# Redis's digest (debug.c): xorDigest(d, data) is d ^= SHA1(data), order-free; mixDigest(d, data) is
# d = SHA1(d ^ SHA1(data)), which keeps order. Kept as 20-byte strings; the SHA-1 of the data is taken once.
_ZERO = bytes(20)


def _sha(data: Buffer) -> bytes:
    return sha1(data).digest()


def _xor(digest: bytes, hashed: bytes) -> bytes:
    return (int.from_bytes(digest, "big") ^ int.from_bytes(hashed, "big")).to_bytes(20, "big")


def _mix(digest: bytes, hashed: bytes) -> bytes:
    return _sha(_xor(digest, hashed))


_UINT32_ZERO = _sha(b"\0\0\0\0")  # htonl(OBJ_STRING), and htonl(0) for database 0
_EXPIRE_MARK = _sha(b"!!expire!!")


def value_digest(start: bytes, value_hash: bytes, has_deadline: bool) -> bytes:
    """Redis's ``xorObjectDigest`` of a string whose value's SHA-1 is ``value_hash``, mixed into ``start``."""
    digest = _mix(_mix(start, _UINT32_ZERO), value_hash)
    return _xor(digest, _EXPIRE_MARK) if has_deadline else digest


async def _hash(value: Buffer) -> bytes:
    if len(value) >= _THREAD_HASH:
        return await asyncio.to_thread(_sha, value)
    return _sha(value)


Signer = Callable[[bytes, bytes, int], None]  # (key, the SHA-1 of its value, its deadline)
Finish = Callable[[], None]  # writes the reply once every key is signed


def _sign(c: Client, take_snapshot: Callable[[], Snapshot], sign: Signer, finish: Finish) -> Any:
    """Hand ``sign`` every key of a snapshot with its value's SHA-1, then call ``finish``.

    Inside EXEC, with every value in RAM, all of it happens now: a transaction runs whole, and a command that
    returned an awaitable would let other clients in before the rest of its queue. Otherwise it is a coroutine
    that takes the snapshot when it starts, reads cold values from their segments, hashes values of 1 MiB and
    more in a worker thread (the loop meanwhile serves other clients, as it does every ``_YIELD_EVERY`` keys),
    and stops early if the client goes away. The snapshot is closed (its segment pins dropped) either way."""
    if c.executing_transaction:
        snap = take_snapshot()
        items = snap.in_memory()
        if items is not None:
            try:
                for key, value, expire_at in items:
                    sign(key, _sha(value), expire_at)
            finally:
                snap.close()
            finish()
            return None
        snap.close()  # a value to read from disk: the rest of the queue waits for it, as after a cold GET in EXEC
    return _sign_later(c, take_snapshot, sign, finish)


async def _sign_later(c: Client, take_snapshot: Callable[[], Snapshot], sign: Signer, finish: Finish) -> None:
    snap = take_snapshot()  # here, not before: a coroutine dropped unstarted (its client closing) pins nothing
    try:
        done = 0
        async for key, value, expire_at in snap.items():
            sign(key, await _hash(value), expire_at)
            done += 1
            if done % _YIELD_EVERY == 0:
                await asyncio.sleep(0)  # the snapshot holds the instant; other clients go on meanwhile
                if c.closed:
                    return
    finally:
        snap.close()
    finish()


@command(
    "debug",
    -2,
    f"{ADMIN} noscript {LOADING} {STALE}",
    group="server",
    since="1.0.0",
    complexity="Depends on subcommand.",
    summary="A container for debugging commands.",
    protected="enable-debug-command",
    doc_flags="syscmd",
)
def debug_(c: Client, argv: list[Any]) -> Any:
    sub = option(argv[1])
    found = _SUBCOMMANDS.get(sub)
    if found is None or not found[1] <= len(argv) <= found[2]:
        raise CommandError(errors.subcommand_syntax(bytes(argv[1]), "debug"))
    return found[0](c, argv)


def _help(c: Client, argv: list[Any]) -> None:
    lines = ["DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"]
    for usage, *description in HELP:
        lines.append(usage)
        lines.extend(f"    {line}" for line in description)
    lines += ["HELP", "    Prints this help."]
    c.reply.array(len(lines))
    for line in lines:
        c.reply.simple(line)


def _digest(c: Client, argv: list[Any]) -> Any:
    """Redis's ``computeDatasetDigest`` of one database (0): the XOR of every key's digest, after the database's
    number is mixed in; 40 zeros for no keys."""
    total = [_ZERO, 0]  # the XOR so far, keys signed

    def sign(key: bytes, value_hash: bytes, expire_at: int) -> None:
        digest = value_digest(_mix(_ZERO, _sha(key)), value_hash, expire_at != 0)
        total[0] = _xor(total[0], _sha(digest))
        total[1] += 1

    def finish() -> None:
        final = _xor(_mix(_ZERO, _UINT32_ZERO), total[0]) if total[1] else _ZERO
        c.reply.simple(final.hex())

    return _sign(c, c.keyspace.snapshot, sign, finish)


def _digest_value(c: Client, argv: list[Any]) -> Any:
    """One signature per key named, of its value and deadline only; 40 zeros for a missing key. As Redis's,
    it sees keys past their deadline that are still stored."""
    ks = c.keyspace
    keys = [bytes(k) for k in argv[2:]]
    digests: dict[bytes, bytes] = {}

    def take_named() -> Snapshot:
        entries = {key: entry for key in keys if (entry := ks.peek(key)) is not None}
        return take(entries, ks.log, 0)  # now=0: keys past their deadline too

    def sign(key: bytes, value_hash: bytes, expire_at: int) -> None:
        digests[key] = value_digest(_ZERO, value_hash, expire_at != 0)

    def finish() -> None:
        c.reply.array(len(keys))
        for key in keys:
            c.reply.simple(digests.get(key, _ZERO).hex())

    return _sign(c, take_named, sign, finish)


def _object(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[2])
    entry = c.keyspace.peek(key)
    if entry is None:
        raise CommandError(errors.NO_SUCH_KEY)
    length = entry.value_len
    idle = max(c.keyspace.ram.clock - entry.atime, 0)
    shared = refcount(c, entry)

    def reply(encoding: bytes | None) -> None:
        if encoding is None:  # deleted while its bytes were read
            c.reply.error(errors.NO_SUCH_KEY)
            return
        c.reply.simple(
            f"Value at:{id(entry):#x} refcount:{shared} encoding:{encoding.decode()} "
            f"serializedlength:{len(encode_length(length)) + length} lru:{entry.atime & LRU_CLOCK_MAX} "
            f"lru_seconds_idle:{idle}"
        )

    return with_encoding(c, key, entry, reply)


def _positive(raw: bytes | bytearray) -> int:
    """Redis's ``getPositiveLongFromObjectOrReply``: one message for a negative number and for no number."""
    n = parse_int(raw, _NOT_POSITIVE)
    if n < 0:
        raise CommandError(_NOT_POSITIVE)
    return n


def _populate(c: Client, argv: list[Any]) -> None:
    """Under ``noeviction`` or a ``volatile-*`` policy the keys are refused together (-OOM, nothing written) when
    they would not all fit, as MSET is; Redis's POPULATE ignores maxmemory. The reply is a write's: it waits for
    the log."""
    count = _positive(argv[2])
    prefix = c_word(argv[3]) if len(argv) > 3 else b"key"
    size = _positive(argv[4]) if len(argv) > 4 else 0
    ks = c.keyspace
    seg_log = ks.log
    if seg_log is not None and (refused := seg_log.misconf()):
        raise CommandError(refused)
    pairs = []
    for j in range(count):
        key = b"%s:%d" % (prefix, j)
        if ks.lookup(key) is None:
            value = b"value:%d" % j
            pairs.append((key, value[:size].ljust(size, b"\0") if size else value))
    try:
        ks.check_room(pairs)
    except OutOfMemory:
        raise CommandError(errors.OOM) from None
    start = c.output_mark
    for key, value in pairs:
        ks.set(key, value)
    c.reply.ok()
    if seg_log is not None:
        c.hold_for_log(start)


def _protocol(c: Client, argv: list[Any]) -> None:
    r = c.reply
    name = option(argv[2])
    resp3 = r.proto == 3
    if name == b"string":
        r.bulk(b"Hello World")
    elif name == b"integer":
        r.integer(12345)
    elif name == b"double":
        r.double(3.141)
    elif name == b"bignum":
        number = b"1234567999999999999999999999999999999"
        r.raw(b"(%s\r\n" % number) if resp3 else r.bulk(number)
    elif name == b"null":
        r.null()
    elif name in (b"array", b"set"):
        (r.set if name == b"set" else r.array)(3)
        for j in range(3):
            r.integer(j)
    elif name == b"map":
        r.map(3)
        for j in range(3):
            r.integer(j)
            r.boolean(j == 1)
    elif name == b"attrib":
        if resp3:
            r.raw(b"|1\r\n")
            r.bulk(b"key-popularity")
            r.array(2)
            r.bulk(b"key:123")
            r.integer(90)
        r.bulk(b"Some real reply following the attribute")
    elif name == b"push":
        if not resp3:
            raise CommandError("ERR RESP2 is not supported by this command")
        r.push_header(2)
        r.bulk(b"server-cpu-usage")
        r.integer(42)
        r.bulk(b"Some real reply following the push reply")
    elif name in (b"true", b"false"):
        r.boolean(name == b"true")
    elif name == b"verbatim":
        r.verbatim("This is a verbatim\nstring")
    else:
        raise CommandError(f"ERR Wrong protocol type name. Please use one of the following: {_PROTOCOL_TYPES}")


_STRTOD = re.compile(rb"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)")
_ATOI = re.compile(rb"\s*([+-]?\d+)")


def _sleep(c: Client, argv: list[Any]) -> None:
    """The whole server stops, as Redis's (``strtod``: what does not start with a number sleeps 0 s)."""
    match = _STRTOD.match(c_word(argv[2]))
    seconds = float(match.group(1)) if match else 0.0
    if seconds > 0:
        time.sleep(min(seconds, threading.TIMEOUT_MAX))  # inf and 1e30 too: as long as the platform can
    c.reply.ok()


def _set_active_expire(c: Client, argv: list[Any]) -> None:
    match = _ATOI.match(c_word(argv[2]))  # atoi: 0 (or no number) turns it off
    c.server.active_expire = bool(match and int(match.group(1)))
    c.reply.ok()


def _error(c: Client, argv: list[Any]) -> None:
    # As written (no ERR added; CR and LF become spaces), and raw, as Redis's addReplySds: an error reply that
    # counts in no errorstats and does not make DEBUG a failed call.
    c.reply.raw(b"-%s\r\n" % errors.scrub(text(argv[2])).encode("utf-8", "surrogateescape"))


def _log(c: Client, argv: list[Any]) -> None:
    log.warning("DEBUG LOG: %s", errors.scrub(text(argv[2])))
    c.reply.ok()


def _change_repl_id(c: Client, argv: list[Any]) -> None:
    log.warning("Changing replication IDs after receiving DEBUG change-repl-id")
    c.server.replication.change_id()
    c.reply.ok()


def _restart(c: Client, argv: list[Any]) -> None:
    """RESTART [ms]: stop gracefully (after CONFIG REWRITE of the settings file, if there is one), then execute
    the same command line again; CRASH-AND-RECOVER [ms]: execute it again now, as a crash and a restart would
    (``kvd/restart.py``). The client gets no reply: its connection closes with the process, as in Redis."""
    delay = max(parse_int(argv[2]), 0) if len(argv) > 2 else 0
    graceful = option(argv[1]) == b"restart"
    why = cannot_restart()
    if why is None and graceful and c.server.settings.config_file:
        try:
            rewrite_config(c.server.settings)
        except CommandError as exc:
            why = f"configuration rewrite failed: {exc.message}"
    if why is not None:
        log.warning("Can't restart: %s", why)
        raise CommandError("ERR failed to restart the server. Check server logs.")
    if graceful:
        c.server.request_restart(delay)
        c.close_after_reply = True
        return
    log.warning("DEBUG CRASH-AND-RECOVER: executing again without a shutdown, as asked by client %s", c.addr)
    exec_again(delay)


def _crash(c: Client, argv: list[Any]) -> None:
    """The process dies where it stands, after one line in the log: no shutdown, no final fsync, as a crash
    would leave it."""
    sub = option(argv[1])
    if sub == b"segfault":
        log.warning("DEBUG SEGFAULT: crashing with SIGSEGV, as asked by client %s", c.addr)
        os.kill(os.getpid(), signal.SIGSEGV)  # faulthandler prints every thread's stack, then the signal kills
    elif sub == b"panic":
        log.critical("Guru Meditation: DEBUG PANIC called at Unix time %d", int(time.time()))
    else:
        log.critical("=== ASSERTION FAILED === ==> DEBUG ASSERT called by client %s", c.addr)
    os.abort()  # PANIC and ASSERT; after SEGFAULT only if the signal did not end the process


# name -> (handler, fewest and most arguments, the name included), as debug.c's argc checks
_ANY = 1 << 31
_SUBCOMMANDS: dict[bytes, tuple[Callable[[Client, list[Any]], Any], int, int]] = {
    b"help": (_help, 2, 2),
    b"digest": (_digest, 2, 2),
    b"digest-value": (_digest_value, 2, _ANY),
    b"object": (_object, 3, 3),
    b"populate": (_populate, 3, 5),
    b"protocol": (_protocol, 3, 3),
    b"sleep": (_sleep, 3, 3),
    b"set-active-expire": (_set_active_expire, 3, 3),
    b"error": (_error, 3, 3),
    b"log": (_log, 3, 3),
    b"change-repl-id": (_change_repl_id, 2, 2),
    b"restart": (_restart, 2, _ANY),
    b"crash-and-recover": (_restart, 2, _ANY),
    b"segfault": (_crash, 2, _ANY),
    b"panic": (_crash, 2, _ANY),
    b"assert": (_crash, 2, _ANY),
}
