"""RDB files: the keyspace in Redis's snapshot format, written as a stream (SYNC) and read back (``kvd-load-rdb``).

kvd's own data is its segment log; an RDB file is how it trades data with the Redis world. ``redis-cli --rdb
FILE`` asks a server for one (``kvd/commands/replication.py`` answers), Redis loads it at start-up, and
``kvd-load-rdb`` (``kvd/tools/load_rdb.py``) writes one into a running server. The layout (``rdb.c``)::

    "REDIS" + the version, four digits
    0xFA <name> <value>                        aux fields: who wrote the file, and when
    0xFE <db>  0xFB <keys> <keys with a TTL>   the database that follows, and its sizes
    [0xFC <unix ms, 8 bytes LE>] 0x00 <key> <value>   one string key (type 0), with its deadline if it has one
    0xFF <CRC-64 of every byte before it, 8 bytes LE; 0 = not computed>

Strings are written as a length and the bytes (``kvd/persist/dump.py``'s encodings), never as Redis's integer
or LZF forms, which a loader may meet but need not: so every entry's size follows from the key and the value's
length alone, and a stream can announce its exact size before it has read a single cold value from disk.

Version 9 (Redis 5.0 to 6.2) is written, not 7.0's 10, 7.2's 11 or 7.4's 12: strings, deadlines and these
opcodes did not change since, and Redis loads every version up to its own, so 9 is what the most Redis versions
load. The reader takes "REDIS" 1 to 12 and skips what only tunes a key (LRU idle time, LFU counter) or sizes a
cluster slot (12's ``0xF4`` slot info: three lengths); any type other than a string, functions and module data
are refused with the type's name, since kvd stores strings only, unless it is told to pass keys of other types
over (lists, sets, sorted sets, hashes and streams of every encoding, 12's hashes with field TTLs too), counting
them by type. Keys of a database other than 0 are refused likewise (kvd has database 0 only), unless it is told
to pass them over too, whatever their type, counting them by database: what a replica of a Redis primary that
uses several databases does. Function libraries (a Redis 7 primary puts every library FUNCTION LOAD made in
each file it writes) are refused too, kvd having no scripting, unless it is told to pass them over, counting
them.

It also takes Valkey 9.0's "VALKEY080". Valkey numbers its own formats from 80 on (it leaves 12 to 79 to Redis,
and refuses them), and 80 differs from 11 by a hash with field TTLs that reuses type 22 (field, value, an 8-byte
deadline each; passed over like Redis's) and a slot-import opcode ``0xF3`` (an atomic slot migration under way,
whose keys are not the node's yet: refused). Later versions, Valkey's 81 on and Redis's 13 on, are refused: they
bring types and opcodes kvd cannot read past.

Complexity: writing is O(size of the file) with one CRC pass (C, ``_dump.c``; about 1.4 GB/s). Reading is one
pass holding one value and one 64 KiB block at a time: 2.3 us per small key against 4.8 reading field by field
(200 000 keys of 12 + 16 bytes, Debian's Python 3.11).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from .dump import (
    _TYPES,
    _VALKEY_TYPES,
    PayloadError,
    _lzf_decompress,
    crc64_update,
    decode_length,
    encode_length,
    encode_string,
)

MAGIC = b"REDIS"
VERSION = 9
MAX_VERSION = 12  # Redis 7.4
VALKEY_MAGIC = b"VALKEY"
VALKEY_VERSION = 80  # Valkey 9.0: "VALKEY080", its only version kvd reads (above)

OP_SLOT_IMPORT = 0xF3  # Valkey 9.0: an atomic slot migration under way
OP_SLOT_INFO = 0xF4  # Redis 7.4: a cluster slot's id, keys and keys with a deadline (three lengths)
OP_FUNCTION = 0xF5  # RDB_OPCODE_FUNCTION2: one library's code (Redis 7.0 GA on)
OP_FUNCTION_PRE_GA = 0xF6  # 7.0 rc1 and rc2: name, engine, [description], code
OP_MODULE_AUX = 0xF7
OP_IDLE = 0xF8
OP_FREQ = 0xF9
OP_AUX = 0xFA
OP_RESIZEDB = 0xFB
OP_EXPIRETIME_MS = 0xFC
OP_EXPIRETIME = 0xFD
OP_SELECTDB = 0xFE
OP_EOF = 0xFF
STRING = 0
_BLOCK = 64 << 10  # bytes read from the file at a time; a longer field is read on its own


class RdbError(ValueError):
    """A file kvd cannot load, and why, with the byte offset where it found out."""


# -- writing ------------------------------------------------------------------------------------------------------


def preamble(keys: int, expires: int, aux: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Everything before the first key: magic, version, aux fields, database 0 and its sizes."""
    out = bytearray(MAGIC + b"%04d" % VERSION)
    for name, value in aux:
        out += bytes([OP_AUX]) + encode_string(name) + encode_string(value)
    out += bytes([OP_SELECTDB, 0, OP_RESIZEDB]) + encode_length(keys) + encode_length(expires)
    return bytes(out)


def key_header(key: bytes, value_len: int, expire_at: int) -> bytes:
    """An entry up to its value's bytes: the deadline (unix ms, 0 = none), the type, the key, the value's length."""
    head = bytes([OP_EXPIRETIME_MS]) + expire_at.to_bytes(8, "little") if expire_at else b""
    return head + bytes([STRING]) + encode_length(len(key)) + key + encode_length(value_len)


def entry_size(key_len: int, value_len: int, expire_at: int) -> int:
    """The bytes ``key_header`` and the value take, without building them."""
    return (9 if expire_at else 0) + 1 + _length_size(key_len) + key_len + _length_size(value_len) + value_len


def _length_size(n: int) -> int:
    return 1 if n < 64 else 2 if n < 16384 else 5 if n <= 0xFFFFFFFF else 9


def trailer(crc: int) -> bytes:
    """The EOF opcode and the checksum; ``crc`` must already cover the EOF byte (``crc64_update(EOF, crc)``)."""
    return crc.to_bytes(8, "little")


EOF = bytes([OP_EOF])


# -- reading ------------------------------------------------------------------------------------------------------


class RdbReader:
    """The string keys of an RDB file, in file order: ``for key, value, expire_at in RdbReader(f)``.

    ``expire_at`` is unix ms (0 = none); keys whose deadline has passed are returned too, for the caller to skip
    (a Redis primary drops them on load). The checksum is verified at the end when the file carries one; an
    error raises ``RdbError`` after the keys read so far were returned, so a caller may have written them."""

    def __init__(
        self,
        stream: BinaryIO,
        skip_other_types: bool = False,
        skip_other_databases: bool = False,
        skip_functions: bool = False,
    ) -> None:
        self._f = stream
        self.skip_other_types = skip_other_types  # keys of other types are passed over and counted in ``skipped``
        self.skipped: Counter[str] = Counter()
        # Keys of databases other than 0, of any type, are passed over and counted in ``other_databases`` (by db).
        self.skip_other_databases = skip_other_databases
        self.other_databases: Counter[int] = Counter()
        self.skip_functions = skip_functions  # function libraries are passed over and counted in ``functions``
        self.functions = 0
        self._db = 0
        # The file is read a block at a time; the fields are slices of the block (a small key is five of them),
        # and the checksum runs over each block's consumed bytes once, not over each field.
        self._buf = b""
        self._pos = 0  # the next byte of _buf to hand out
        self._crc_from = 0  # _buf[_crc_from:_pos] is consumed and not yet in _crc
        self._base = 0  # the file offset of _buf[0]
        self._crc = 0
        self.version = 0
        self.valkey = False  # "VALKEY080": type 22 is Valkey's hash with field TTLs, 0xF3 its slot import
        self.aux: dict[bytes, bytes] = {}
        self.keys_announced = -1  # RESIZEDB's count, when the file has one

    def __iter__(self) -> Iterator[tuple[bytes, bytes, int]]:
        magic = self._read(9)
        if magic[:5] == MAGIC and magic[5:].isdigit():
            self.version = int(magic[5:])
            if not 1 <= self.version <= MAX_VERSION:
                raise RdbError(f"RDB version {self.version} is newer than kvd reads (up to {MAX_VERSION}, Redis 7.4)")
        elif magic[:6] == VALKEY_MAGIC and magic[6:].isdigit():
            self.version = int(magic[6:])
            self.valkey = True
            if self.version != VALKEY_VERSION:
                raise RdbError(f"Valkey RDB version {self.version} is not one kvd reads (only {VALKEY_VERSION}, 9.0)")
        else:
            raise RdbError("not an RDB file: it does not start with REDIS and a four-digit version")
        expire_at = 0
        while True:
            at = self.offset
            op = self._read(1)[0]
            if op == OP_EXPIRETIME_MS:
                expire_at = int.from_bytes(self._read(8), "little")
            elif op == OP_EXPIRETIME:
                expire_at = int.from_bytes(self._read(4), "little") * 1000
            elif op == OP_AUX:
                name = self._string()
                self.aux[name] = self._string()
            elif op == OP_SELECTDB:
                db = self._length()
                if db != 0 and not self.skip_other_databases:
                    raise RdbError(f"the file has keys in database {db} (at byte {at}); kvd has database 0 only")
                self._db = db
            elif op == OP_RESIZEDB:
                self.keys_announced = self._length()
                self._length()
            elif op == OP_SLOT_INFO:
                for _ in range(3):
                    self._length()
            elif op == OP_IDLE:
                self._length()
            elif op == OP_FREQ:
                self._read(1)
            elif op == OP_EOF:
                self._check_crc()
                return
            elif op == STRING:
                key = self._string()
                value = self._string()
                if self._db:
                    self.other_databases[self._db] += 1
                else:
                    yield key, value, expire_at
                expire_at = 0
            elif op in (OP_FUNCTION, OP_FUNCTION_PRE_GA):
                if not self.skip_functions:
                    raise RdbError(f"the file holds a function library (at byte {at}); kvd has no scripting")
                self._skip_function(op)
                self.functions += 1
            elif op == OP_MODULE_AUX:
                raise RdbError(f"the file holds module data (at byte {at}); kvd has no modules")
            elif op == OP_SLOT_IMPORT and self.valkey:
                raise RdbError(
                    f"the file holds a cluster slot import under way (at byte {at}): its keys are not the node's yet"
                )
            else:
                kind = (_VALKEY_TYPES if self.valkey else _TYPES).get(op)
                if kind is None:
                    raise RdbError(f"unknown opcode {op:#04x} at byte {at}: the file is damaged")
                if kind == "module" or not (self.skip_other_types or self._db):
                    raise RdbError(f"the key at byte {at} is a {kind}; kvd stores strings only")
                self._string()  # the key
                self._skip_value(op)
                if self._db:
                    self.other_databases[self._db] += 1
                else:
                    self.skipped[kind] += 1
                expire_at = 0

    @property
    def offset(self) -> int:
        """Bytes of the file read so far."""
        return self._base + self._pos

    def _read(self, n: int) -> bytes:
        pos = self._pos
        end = pos + n
        if end <= len(self._buf):
            self._pos = end
            return self._buf[pos:end]
        return self._refill(n)

    def _refill(self, n: int) -> bytes:
        """``_read`` past the block: the rest of the block and the next one, or for a large value, the value alone
        (read straight from the file, not through a block)."""
        buf, pos = self._buf, self._pos
        self._crc = crc64_update(memoryview(buf)[self._crc_from : pos], self._crc)
        rest = buf[pos:]
        self._base += pos
        if n - len(rest) >= _BLOCK:
            data = rest + self._f.read(n - len(rest))
            if len(data) != n:
                raise RdbError(f"the file ends at byte {self._base + len(data)}, inside a record (truncated?)")
            self._crc = crc64_update(data, self._crc)
            self._base += n
            self._buf, self._pos, self._crc_from = b"", 0, 0
            return data
        buf = rest + self._f.read(_BLOCK)
        self._buf, self._pos, self._crc_from = buf, 0, 0
        if n > len(buf):
            raise RdbError(f"the file ends at byte {self._base + len(buf)}, inside a record (truncated?)")
        self._pos = n
        return buf[:n]

    def _length_bytes(self) -> bytes:
        first = self._read(1)
        extra = {0: 0, 1: 1, 3: 0}.get(first[0] >> 6)
        if extra is None:
            extra = {0x80: 4, 0x81: 8}.get(first[0])
            if extra is None:
                raise RdbError(f"bad length encoding {first[0]:#04x} at byte {self.offset - 1}")
        return first + self._read(extra) if extra else first

    def _length(self) -> int:
        n, encoded, _ = decode_length(memoryview(self._length_bytes()), 0)
        if encoded:
            raise RdbError(f"an encoded string where a length belongs, at byte {self.offset - 1}")
        return n

    def _string(self) -> bytes:
        n, encoded, _ = decode_length(memoryview(self._length_bytes()), 0)
        if not encoded:
            return self._read(n)
        if n in (0, 1, 2):  # int8, int16, int32
            return b"%d" % int.from_bytes(self._read(1 << n), "little", signed=True)
        if n == 3:  # LZF
            compressed = self._length()
            plain = self._length()
            at = self.offset
            try:
                return _lzf_decompress(memoryview(self._read(compressed)), plain)
            except (ValueError, PayloadError):
                raise RdbError(f"a compressed string at byte {at} does not decompress: the file is damaged") from None
        raise RdbError(f"unknown string encoding {n} at byte {self.offset - 1}")

    def _skip_value(self, op: int) -> None:
        """Read past a value of another type than string, by its encoding in rdb.c (``rdbLoadObject``)."""
        if op in (1, 2, 14):  # list, set: strings; quicklist: ziplists
            for _ in range(self._length()):
                self._string()
        elif op == 3:  # sorted set, version 1: member, score as text
            for _ in range(self._length()):
                self._string()
                n = self._read(1)[0]
                if n < 253:  # 253-255: nan, +inf, -inf
                    self._read(n)
        elif op == 4:  # hash: field, value
            for _ in range(2 * self._length()):
                self._string()
        elif op == 5:  # sorted set, version 2: member, score as a binary double
            for _ in range(self._length()):
                self._string()
                self._read(8)
        elif op in (9, 10, 11, 12, 13, 16, 17, 20, 23):  # one blob: zipmap, ziplist, intset, listpack
            self._string()
        elif op == 18:  # quicklist 2: container kind, blob
            for _ in range(self._length()):
                self._length()
                self._string()
        elif op == 22 and self.valkey:  # Valkey 9.0's hash with field TTLs: field, value, deadline (8 bytes)
            for _ in range(self._length()):
                self._string()
                self._string()
                self._read(8)
        elif op in (22, 24):  # Redis 7.4's hash with field TTLs (24: the least deadline first): TTL, field, value
            if op == 24:
                self._read(8)
            for _ in range(self._length()):
                self._length()
                self._string()
                self._string()
        elif op == 25:  # its listpack form: the least deadline, the listpack
            self._read(8)
            self._string()
        else:  # streams: 15 (5.0), 19 (7.0), 21 (7.2)
            self._skip_stream(op)

    def _skip_function(self, op: int) -> None:
        """Read past a function library (``rdbFunctionLoad``): its code; before 7.0 GA, name, engine, an optional
        description and the code."""
        if op == OP_FUNCTION_PRE_GA:
            self._string()  # name
            self._string()  # engine
            if self._length():
                self._string()  # description
        self._string()

    def _skip_stream(self, op: int) -> None:
        for _ in range(self._length()):  # listpacks: master id, listpack
            self._string()
            self._string()
        for _ in range(3 if op == 15 else 8):  # length, last id; from 7.0 first id, max deleted id, entries added
            self._length()
        for _ in range(self._length()):  # consumer groups
            self._string()
            for _ in range(2 if op == 15 else 3):  # last id; from 7.0 entries read
                self._length()
            for _ in range(self._length()):  # pending entries: id, delivery time, delivery count
                self._read(24)
                self._length()
            for _ in range(self._length()):  # consumers: name, seen time, (7.2) active time, their pending ids
                self._string()
                self._read(16 if op == 21 else 8)
                for _ in range(self._length()):
                    self._read(16)

    def _check_crc(self) -> None:
        if self.version < 5:  # checksums came with version 5
            return
        expected = crc64_update(memoryview(self._buf)[self._crc_from : self._pos], self._crc)
        self._crc_from = self._pos
        data = self._buf[self._pos : self._pos + 8]
        self._pos += len(data)
        if len(data) < 8:
            data += self._f.read(8 - len(data))
        if len(data) != 8:
            raise RdbError("the file ends before its checksum (truncated?)")
        stored = int.from_bytes(data, "little")
        if stored and stored != expected:
            raise RdbError(f"checksum mismatch: the file says {stored:#018x}, its bytes give {expected:#018x}")
