"""HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST (Redis ``hyperloglog.c``).

The sketches are strings in Redis's layout (``hll.py``), so everything that moves strings moves them: the log,
replication (a changed sketch goes to replicas as a SET of its new bytes), DUMP/RESTORE, RDB files, GET. Errors
and their order are Redis's: a string that is not a sketch is ``WRONGTYPE``, a sparse sketch whose opcodes do
not add up is ``INVALIDOBJ``, and a command that meets either changes nothing.

As with the bitmap commands, kvd never changes a stored value in place: a PFADD that raises a register stores
a new string (and logs it whole: up to 12 KiB for a dense sketch, where Redis's AOF gets the command). PFCOUNT
on one key keeps Redis's cached cardinality: when the cache is stale it counts and stores the sketch with the
cache filled, as Redis writes it into the string and propagates; a replica counts without storing (Redis
replicas do not propagate their own writes either), and so does a server whose log is refusing writes.
"""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from kvd.notify import STRING, notify
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.store.keyspace import KEPT, Value

from . import hll
from .registry import ADMIN, DENYOOM, FAST, READONLY, WRITE, KeySpec, command
from .values import with_all, with_current

if TYPE_CHECKING:
    from kvd.connection import Client

G = "hyperloglog"


@command(
    "pfadd",
    -2,
    f"{WRITE} {DENYOOM} {FAST}",
    (1, 1, 1),
    group=G,
    since="2.8.9",
    summary="Adds the specified elements to the specified HyperLogLog.",
    usage="key [element ...]",
    complexity="O(1) to add every element.",
    key_flags="RW insert",
)
def pfadd(c: Client, argv: list[Any]) -> Any:
    key = bytes(argv[1])
    limit = c.server.settings.hll_sparse_max_bytes

    def store(old: Value | None, deadline: int) -> None:
        sketch = hll.Sketch.new() if old is None else hll.Sketch.parse(old)
        updated = old is None
        for element in argv[2:]:
            updated = sketch.add(bytes(element), limit) or updated
        if not updated:
            c.keyspace.unshare(key)
            c.reply.integer(0)
            return
        sketch.invalidate()
        c.keyspace.set(key, sketch.data, deadline, history=KEPT)
        notify(c.keyspace, STRING, b"pfadd", key)
        c.reply.integer(1)

    return with_current(c, key, store)


def _count_one(c: Client, key: bytes) -> Any:
    """PFCOUNT of one key: the cached cardinality, or a count that is then cached in the stored string."""

    def reply(value: Value | None, deadline: int) -> None:
        if value is None:
            c.reply.integer(0)
            return
        card = hll.cached(value)
        if card is not None:
            c.reply.integer(card)
            return
        sketch = hll.Sketch.parse(value)
        card = sketch.count()
        log = c.keyspace.log
        if c.server.link is None and (log is None or not log.misconf()):
            sketch.cache(card)
            c.keyspace.set(key, sketch.data, deadline, history=KEPT)
        c.reply.integer(hll.signed(card))

    return with_current(c, key, reply, read=True)


@command(
    "pfcount",
    -2,
    READONLY,
    (1, -1, 1),
    group=G,
    since="2.8.9",
    summary="Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
    usage="key [key ...]",
    complexity="O(1) with a very small average constant time when called with a single key. O(N) with N being "
    "the number of keys, and much bigger constant times, when called with multiple keys.",
    key_specs=(
        KeySpec(
            ("RW", "access"),
            1,
            -1,
            notes="RW because it may change the internal representation of the key, and propagate to replicas",
        ),
    ),
)
def pfcount(c: Client, argv: list[Any]) -> Any:
    keys = [bytes(k) for k in argv[1:]]
    if len(keys) == 1:
        return _count_one(c, keys[0])

    def count(values: list[Value | None]) -> None:
        c.reply.integer(hll.signed(hll.estimate(hll.histogram(hll.union(values)))))

    return with_all(c, keys, count)


@command(
    "pfmerge",
    -2,
    f"{WRITE} {DENYOOM}",
    (1, -1, 1),
    group=G,
    since="2.8.9",
    summary="Merge N different HyperLogLogs into a single one.",
    usage="destkey [sourcekey ...]",
    complexity="O(N) to merge N HyperLogLogs, but with high constant times.",
    key_specs=(KeySpec(("RW", "access", "insert"), 1, 0, 1), KeySpec(("RO", "access"), 2, -1, 1)),
)
def pfmerge(c: Client, argv: list[Any]) -> Any:
    dest = bytes(argv[1])
    keys = [dest, *(bytes(k) for k in argv[2:])]
    limit = c.server.settings.hll_sparse_max_bytes

    def store(values: list[Value | None]) -> None:
        acc = hll.union(values)  # the destination is a source too, as in Redis
        any_dense = any(value is not None and value[4] == hll.DENSE for value in values)
        target = hll.Sketch.new() if values[0] is None else hll.Sketch.parse(values[0])
        if any_dense:
            target.to_dense()
        target.raise_all(acc, limit)
        target.invalidate()
        entry = c.keyspace.peek(dest)
        c.keyspace.set(dest, target.data, entry.expire_at if entry is not None else 0, history=KEPT)
        notify(c.keyspace, STRING, b"pfadd", dest)  # Redis's event for a merge: a mass add
        c.reply.ok()

    return with_all(c, keys, store)


@command(
    "pfdebug",
    3,
    f"{WRITE} {DENYOOM} {ADMIN}",
    (2, 2, 1),
    group=G,
    since="2.8.9",
    summary="Internal commands for debugging HyperLogLog values",
    usage="subcommand key",
    complexity="N/A",
    key_flags="RW access",
    doc_flags="syscmd",
)
def pfdebug(c: Client, argv: list[Any]) -> Any:
    """GETREG (the 16384 registers; a sparse sketch is stored dense first), DECODE (a sparse sketch's opcodes),
    ENCODING, TODENSE (1 if it converted)."""
    sub = bytes(argv[1])
    key = bytes(argv[2])

    def run(value: Value | None, deadline: int) -> None:
        if value is None:
            raise CommandError("ERR The specified key does not exist")
        sketch = hll.Sketch.parse(value)
        name = sub.lower()
        if name in (b"getreg", b"todense"):
            converted = sketch.to_dense()
            if converted:
                c.keyspace.set(key, sketch.data, deadline, history=KEPT)
            else:
                c.keyspace.unshare(key)
            if name == b"todense":
                c.reply.integer(int(converted))
                return
            c.reply.array(hll.REGISTERS)
            for register in sketch.registers():
                c.reply.integer(register)
            return
        c.keyspace.unshare(key)
        if name == b"decode":
            if sketch.dense:
                raise CommandError("ERR HLL encoding is not sparse")
            c.reply.bulk(sketch.describe().encode())
        elif name == b"encoding":
            c.reply.simple("dense" if sketch.dense else "sparse")
        else:
            raise CommandError(f"ERR Unknown PFDEBUG subcommand '{errors.c_string(sub)}'")

    return with_current(c, key, run)


SELFTEST_ELEMENTS = 1_000_000


@command(
    "pfselftest",
    1,
    ADMIN,
    group=G,
    since="2.8.9",
    summary="An internal command for testing HyperLogLog values",
    complexity="N/A",
    doc_flags="syscmd",
)
def pfselftest(c: Client, argv: list[Any]) -> None:
    """Redis's two checks: dense registers keep what is written to them, neighbours untouched (1000 rounds of
    random registers), and a dense and a sparse sketch fed the same unique elements agree at every power of ten
    and stay within six standard errors of the truth. Redis feeds ten million elements; kvd, whose loop around the
    C is Python, feeds one million (0.7 s on this project's machines, the event loop held all along)."""
    error = self_test(c.server.settings.hll_sparse_max_bytes)
    if error:
        raise CommandError(f"TESTFAILED {error}")
    c.reply.ok()


def self_test(sparse_max_bytes: int, elements: int = SELFTEST_ELEMENTS, rounds: int = 1000) -> str:
    """PFSELFTEST's checks; the failure's text, or '' when all pass."""
    rng = random.Random()
    six_bits = bytes(b & 63 for b in range(256))
    for _ in range(rounds):
        regs = bytearray(rng.randbytes(hll.REGISTERS).translate(six_bits))
        back = hll.unpack(hll.pack(regs))
        if back != regs:
            i = next(i for i in range(hll.REGISTERS) if back[i] != regs[i])
            return f"Register {i} should be {regs[i]} but is {back[i]}"
    dense = hll.Sketch.new()
    dense.to_dense()
    sparse = hll.Sketch.new()
    relerr = 1.04 / hll.REGISTERS**0.5
    seed = rng.getrandbits(64)
    checkpoint = 1
    for j in range(1, elements + 1):
        element = (j ^ seed).to_bytes(8, "little")
        index, count = hll.pattern(element)
        dense.set(index, count, sparse_max_bytes)
        sparse.set(index, count, sparse_max_bytes)
        if j != checkpoint:
            continue
        if j < sparse_max_bytes // 2 and sparse.dense:
            return "sparse encoding not used"
        card = dense.count()
        if card != sparse.count():
            return "dense/sparse disagree"
        maxerr = 1 if j == 10 else math.ceil(relerr * 6 * checkpoint)
        if abs(checkpoint - card) > maxerr:
            return f"Too big error. card:{checkpoint} abserr:{abs(checkpoint - card)}"
        checkpoint *= 10
    return ""
