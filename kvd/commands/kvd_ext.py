"""kvd's own commands for KV-cache clients, in the ``KVD.`` namespace like a Redis module's.

``KVD.PREFIXLEN key [key ...]`` answers the scheduler's question, "how many leading chunks of this prompt are
cached?", in one round trip: the count of leading keys that exist. LMCache's Redis path spends one EXISTS round
trip per chunk for the same answer. As a side effect the hits are touched in the LRU and cold ones start
loading from disk into RAM, so the GETs that follow a positive answer are served from memory.

``KVD.REPORT name value [name value ...]`` lets connectors add their client-side counters (hit tokens, load
time, ...) to the ``# Connector`` section of INFO, so one INFO shows both sides of the cache.

``KVD.GETINTO name offset slot key [key ...]`` is MGET for a client on kvd's host: value ``i`` is copied into
the client's shared memory ``/dev/shm/<name>`` at ``offset + i * slot`` instead of being sent, and the reply is
each value's length (-1 for a missing key). A value longer than ``slot`` is not copied; its length tells the client
to GET it.

``KVD.SETFROM name key offset length [key offset length ...]`` is MSET the other way: each key's value is the
``length`` bytes at ``offset`` of the same kind of file, copied into memory kvd owns, and then every key is set at
once, as MSET sets them (logged, replicated and evicted like any SET: from there on nothing knows where the bytes
came from). The copies of large values run on the ``Copier``'s threads, and the keys are set when all are done;
meanwhile the client's later commands wait, other clients do not. Which files kvd reads and writes, and why it
is safe, is ``kvd/shm.py``'s.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from kvd.buffers import uninitialized
from kvd.protocol import errors
from kvd.protocol.errors import CommandError
from kvd.shm import SharedMemory
from kvd.store.bufpool import MIN_SIZE

from .args import parse_int
from .registry import DENYOOM, FAST, LOADING, READONLY, STALE, WRITE, command
from .strings import set_all

if TYPE_CHECKING:
    from kvd.connection import Client

_COUNTER = re.compile(rb"^[a-z][a-z0-9_]{0,63}$")
MAX_COUNTERS = 64


@command(
    "kvd.prefixlen",
    -2,
    f"{READONLY} {FAST}",
    (1, -1, 1),
    group="kvd",
    since="0.1.0",
    complexity="O(N)",
    summary="Returns how many leading keys of the list exist (the cached prefix length).",
    usage="key [key ...]",
    key_flags="RO",  # reads whether each exists, as EXISTS, not the values
)
def prefixlen(c: Client, argv: list[Any]) -> None:
    found = c.keyspace.prefix_length([bytes(k) for k in argv[1:]])
    stats = c.server.stats
    stats.prefix_lookups += 1
    stats.prefix_keys_hit += found
    stats.prefix_keys_missed += len(argv) - 1 - found
    c.reply.integer(found)


@command(
    "kvd.report",
    -3,
    f"{FAST} {LOADING} {STALE}",  # the connector reports while a replica loads
    group="kvd",
    since="0.1.0",
    complexity="O(N)",
    summary="Adds client-side counters to the Connector section of INFO.",
    usage="counter increment [counter increment ...]",
)
def report(c: Client, argv: list[Any]) -> None:
    if len(argv) % 2 == 0:
        raise CommandError("ERR wrong number of arguments for 'kvd.report' command")
    counters = c.server.stats.connector
    updates = []
    for i in range(1, len(argv), 2):
        name = bytes(argv[i]).lower()
        if not _COUNTER.match(name):
            raise CommandError("ERR counter names are 1-64 characters of a-z, 0-9 and _, starting with a letter")
        updates.append((name.decode(), parse_int(argv[i + 1])))
    for name, value in updates:
        if name not in counters and len(counters) >= MAX_COUNTERS:
            raise CommandError(f"ERR too many connector counters (at most {MAX_COUNTERS})")
        counters[name] = counters.get(name, 0) + value
    c.reply.ok()


def _local_only(c: Client, argv: list[Any], instead: str) -> SharedMemory:
    """The connection's shared-memory mappings; refused for a client that is not on kvd's host (``instead``: the
    command it should use)."""
    if not c.local:
        command = bytes(argv[0]).decode("utf-8", "replace").upper()
        raise CommandError(f"ERR {command} is for clients on kvd's host (the unix socket or loopback); use {instead}")
    memory = c.shared_memory
    if memory is None:
        memory = c.shared_memory = SharedMemory()
    return memory


def _offset(raw: Any) -> int:
    offset = parse_int(raw, "ERR offset is not an integer or out of range")
    if offset < 0:
        raise CommandError("ERR offset is not an integer or out of range")
    return offset


@command(
    "kvd.getinto",
    -5,
    READONLY,
    (4, -1, 1),
    group="kvd",
    since="0.1.0",
    complexity="O(N) plus the bytes copied",
    summary="Copies the values of keys into a client's shared memory on kvd's host, as MGET sends them.",
    usage="name offset slot key [key ...]",
    key_flags="RO access",
)
def getinto(c: Client, argv: list[Any]) -> Any:
    memory = _local_only(c, argv, "MGET")
    name = bytes(argv[1])
    offset = _offset(argv[2])
    slot = parse_int(argv[3], "ERR slot is not an integer or out of range")
    if slot < 1:
        raise CommandError("ERR slot is not an integer or out of range")
    end = offset + slot * (len(argv) - 4)
    memory.view(name, end)  # refused before any read if the file will not do
    values = [c.keyspace.get(bytes(k)) for k in argv[4:]]

    def plan(ready: list[Any]) -> tuple[list[int], list[tuple[memoryview, Any]]]:
        """Each value's length, and the copies to make (of those that fit their slot)."""
        view = memory.view(name, end)  # again: the file may have changed while disk reads ran
        lengths, jobs = [], []
        for i, value in enumerate(ready):
            if value is None:
                lengths.append(-1)
                continue
            n = len(value)
            if n <= slot:
                at = offset + i * slot
                jobs.append((view[at : at + n], value))
                c.server.stats.shm_loaded_bytes += n
            lengths.append(n)
        return lengths, jobs

    def reply(lengths: list[int]) -> None:
        c.reply.array(len(lengths))
        for n in lengths:
            c.reply.integer(n)

    copier = c.server.copier

    def is_cold(v: Any) -> bool:  # an awaitable: a value the disk tier is reading
        return v is not None and not isinstance(v, bytes | bytearray | memoryview)

    cold = [v for v in values if is_cold(v)]
    if not cold:
        lengths, jobs = plan(values)
        if copier.inline(jobs):
            copier.copy_now(jobs)
            reply(lengths)
            return None

        async def copy_then_reply() -> None:
            await copier.copy(jobs)  # on worker threads: the loop serves other clients meanwhile
            reply(lengths)

        return copy_then_reply()

    async def read_copy_reply() -> None:
        loaded = iter(await asyncio.gather(*cold))
        lengths, jobs = plan([next(loaded) if is_cold(v) else v for v in values])
        await copier.copy(jobs)
        reply(lengths)

    return read_copy_reply()


@command(
    "kvd.setfrom",
    -5,
    f"{WRITE} {DENYOOM}",
    (2, -1, 3),
    group="kvd",
    since="0.1.0",
    complexity="O(N) plus the bytes copied",
    summary="Sets keys to values copied from a client's shared memory on kvd's host, as MSET sets them.",
    usage="name key offset length [key offset length ...]",
    key_flags="OW update",
)
def setfrom(c: Client, argv: list[Any]) -> Any:
    if (len(argv) - 2) % 3:
        raise CommandError(errors.wrong_arity("kvd.setfrom"))
    memory = _local_only(c, argv, "MSET")
    name = bytes(argv[1])
    keys = [bytes(k) for k in argv[2::3]]
    spans = []
    for raw_offset, raw_length in zip(argv[3::3], argv[4::3], strict=True):
        offset = _offset(raw_offset)
        length = parse_int(raw_length, "ERR length is not an integer or out of range")
        if length < 0:
            raise CommandError("ERR length is not an integer or out of range")
        if length > c.server.settings.proto_max_bulk_len:
            raise CommandError(errors.STRING_TOO_LONG)
        spans.append((offset, offset + length))
    view = memory.view(name, max(end for _, end in spans))
    sources = [view[start:end] for start, end in spans]
    c.keyspace.check_room(list(zip(keys, sources, strict=True)))  # an -OOM before any copy, as MSET's
    pool = c.keyspace.pool
    values: list[Any] = []
    jobs: list[tuple[memoryview, Any]] = []
    for source in sources:
        n = len(source)
        if n < MIN_SIZE:
            values.append(bytes(source))  # as the parser makes a small value: an immutable bytes
            continue
        value = pool.take(n) or uninitialized(n)  # every byte is written by the copy
        values.append(value)
        jobs.append((memoryview(value), source))

    def store() -> None:
        for target, _ in jobs:
            target.release()  # the stored value is exported by nothing (the pool checks, on its way out)
        set_all(c, list(zip(keys, values, strict=True)))
        c.server.stats.shm_saved_bytes += sum(map(len, values))
        c.reply.ok()

    copier = c.server.copier
    if copier.inline(jobs):
        copier.copy_now(jobs)
        store()
        return None

    async def copy_then_store() -> None:
        await copier.copy(jobs)  # on worker threads: the loop serves other clients meanwhile
        store()

    return copy_then_store()
