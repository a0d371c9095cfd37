"""kvd and redis-server answer the same random request streams with the same bytes.

Each step sends one request to both servers and compares the replies. The streams come from a seeded grammar
over kvd's commands: valid and invalid options, integers at the edges of 64 bits, wrong argument counts,
unknown commands and subcommands, MULTI/EXEC with WATCH while a second connection writes, HELLO switching
between RESP2 and RESP3 in the middle of a stream; and for one request in ten, COMMAND GETKEYSANDFLAGS of it
(where each server finds its keys and what it does to them). The hand-written byte tests (``test_raw_protocol.py``)
pin what someone thought of; this finds what nobody did (it found nine differences when it was written:
DECRBY of -2**63, GETEX's option rules and missing-key order, EXPIRE's option-before-amount order, SCAN's
cursor syntax, a bad subcommand or EXEC's own arity error inside MULTI, CONFIG SET's checks, NUL bytes in
echoed arguments).

Where the servers may differ by design, a reply is compared after normalising it: TTLs to the second,
KEYS and complete SCANs as sorted lists (an incomplete SCAN page only by shape: kvd's cursor is a sequence
number, Redis's a reversed-bit hash index), RANDOMKEY by null-ness, DBSIZE not at all (Redis counts expired
keys it has not reclaimed yet; live keys are compared with KEYS every 50 steps), HELLO by its protocol,
MEMORY by its errors only (the byte counts are each server's own, and Redis still counts a key whose
deadline has passed until it reclaims it, where kvd answers null), DUMP by the value its payload holds (Redis
LZF-compresses strings over 20 bytes, kvd does not; each RESTOREs the other's), OBJECT IDLETIME as an integer,
OBJECT ENCODING's int and embstr as one (an INCRBYFLOAT result that reads as an integer is embstr in Redis; kvd
keeps no encodings and answers int: kvd/commands/objects.py).
Not generated, because kvd differs on purpose: SELECT of another database (kvd has one, and redis-server
runs with ``--databases 1``), the maxmemory-policy default, CONFIG SET's reason for a bad value (kvd names
the expected form), deadlines under a second (the servers would see them at different moments), INFO, TIME,
CLIENT LIST, COMMAND's table. HELLO's NOAUTH error is compared with Redis 7.2's wording, which kvd uses.

Inline commands and malformed multibulk framing are compared too, each input on fresh connections since a
protocol error closes them. Two Redis quirks are left out of those inputs: Redis ends a header line at its
first CR whatever byte follows, and stops looking for the end of a line at a NUL byte (``strchr``), so
``*1\\r?`` is a header to Redis and a NUL in a line makes it wait for more bytes. kvd requires CRLF and
answers such input with a protocol error and a close (docs/operations.md, "Failures and their cost").

On a difference the failure names the seed, the step, the request, both replies and the requests before.
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.raw import ConnectionClosed, RawConnection, encode, parse, reply_end
from support.server import ServerProcess
from support.tools import find_tool

from kvd.persist.dump import dump_payload, load_payload

pytestmark = [pytest.mark.compat, pytest.mark.kvd_only, pytest.mark.timeout(300)]

Request = list[bytes]
HISTORY = 12  # requests shown before the one that differed

# Values include two large ones: 40 000 bytes are received in place, 300 000 land with their SET (landing.py).
KEYS = [b"k0", b"k1", b"k2", b"k3", b"", b"{k}", b"k[", b"a*", b"k\\", b"^k", b"k-"]
VALUES = [b"v", b"", b"10", b"-5", b"0", b"9223372036854775807", b"-9223372036854775808", b"abc", b" 1", b"1.5",
          b"+1", b"01", b"1e3", b"x" * 40, b"\x00\xff", b"-0", b"18446744073709551616",
          b"y" * 40_000, b"z" * 300_000]  # fmt: skip
INTEGERS = [b"0", b"1", b"-1", b"2", b"10", b"100", b"-100", b"abc", b"1.5", b"", b"9223372036854775807",
            b"-9223372036854775808", b"9223372036854775808", b"100000", b"+5", b"01", b" 3"]  # fmt: skip
# RESTORE payloads: strings as DUMP writes them (kvd's equal Redis's up to 20 bytes), and broken ones.
PAYLOADS = [dump_payload(v) for v in (b"v", b"10", b"-5", b"x" * 40, b"\x00\xff", b"y" * 40_000)]
PAYLOADS += [PAYLOADS[0][:-1] + b"?", b"", b"\x01" + PAYLOADS[0][1:], PAYLOADS[0][:3]]
# INCRBYFLOAT increments: long double rounding (0.1 + 0.2), range ends, what strtold takes and Redis refuses.
FLOATS = [b"0.1", b"0.2", b"-0.3", b"1e3", b"1.5", b"5e-18", b"1e4932", b"-1e4932", b"0x1p3", b"inf", b"-inf",
          b"nan", b"abc", b" 1", b"", b"3", b"-0", b"1e-4951", b"123456789.123456789"]  # fmt: skip
# Bit offsets: edges of a byte, BITFIELD's #n form, junk, and the first offset past 512 MB (refused); none that
# would make either server allocate hundreds of megabytes.
BIT_OFFSETS = [b"0", b"1", b"7", b"8", b"13", b"64", b"100", b"1000", b"319999", b"2400000", b"-1", b"abc", b"",
               b"#0", b"#3", b"#-1", b"4294967296", b"9223372036854775807", b"01"]  # fmt: skip
FIELD_TYPES = [b"i1", b"i5", b"i8", b"i16", b"i63", b"i64", b"u1", b"u7", b"u8", b"u63", b"u64", b"i0", b"i65",
               b"x8", b"", b"I8", b"i08", b"u-1"]  # fmt: skip
# Relative expiry amounts: errors (0, -1, junk, overflow) or far enough away that no step outlives them.
DURATIONS = [b"100000", b"200000", b"0", b"-1", b"abc", b"9223372036854775807", b"922337203685477", b""]
NAMES = [b"get", b"set", b"mget", b"mset", b"msetnx", b"setnx", b"setex", b"psetex", b"getdel", b"getex",
         b"getset", b"del", b"unlink", b"exists", b"type", b"strlen", b"getrange", b"append", b"incr", b"decr",
         b"incrby", b"decrby", b"ttl", b"pttl", b"expire", b"pexpire", b"expireat", b"pexpireat", b"persist",
         b"expiretime", b"pexpiretime", b"keys", b"scan", b"dbsize", b"echo", b"ping", b"select", b"watch",
         b"client", b"config", b"auth", b"hello", b"exec", b"discard", b"setrange", b"substr", b"rename",
         b"renamenx", b"copy", b"touch", b"incrbyfloat", b"memory", b"role", b"move", b"swapdb", b"dump",
         b"restore", b"setbit", b"getbit", b"bitcount", b"bitpos", b"bitop", b"bitfield", b"bitfield_ro",
         b"lcs", b"object", b"sort", b"sort_ro", b"pfadd", b"pfcount", b"pfmerge", b"pfdebug"]  # fmt: skip
# Generated by their own productions only: random arguments could block WAIT for ever (WAIT 1 0), or ask
# SLOWLOG and LATENCY for entries whose durations are each server's own. No production subscribes: a
# subscription changes how many replies a request gets, which test_pubsub.py compares instead.
BAD_PORTS = [b"x", b"-1", b"65536", b""]  # what REPLICAOF refuses; a valid one would make redis-server a replica
OWN_PRODUCTIONS = [b"WAIT", b"SLOWLOG", b"LATENCY", b"PUBLISH", b"SPUBLISH", b"PUBSUB"]


class Grammar:
    """Random requests from a seeded ``random.Random``; every choice is the generator's, so a seed replays."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.productions: list[Callable[[], Request]] = [
            self.set_, self.set_, self.set_, self.expire, self.expire, self.getex, self.arity, self.arity,
            lambda: [b"GET", self.key()],
            lambda: [b"MGET", *self.keys()],
            lambda: [b"MSET", *self.pairs()],
            lambda: [b"MSETNX", *self.pairs()],
            lambda: [b"SETNX", self.key(), self.value()],
            lambda: [self.pick([b"SETEX", b"PSETEX"]), self.key(), self.pick(DURATIONS), self.value()],
            lambda: [self.pick([b"GETDEL", b"TYPE", b"STRLEN", b"INCR", b"DECR", b"PERSIST"]), self.key()],
            lambda: [self.pick([b"TTL", b"PTTL", b"EXPIRETIME", b"PEXPIRETIME"]), self.key()],
            lambda: [b"GETSET", self.key(), self.value()],
            lambda: [self.pick([b"DEL", b"UNLINK", b"EXISTS"]), *self.keys()],
            lambda: [b"GETRANGE", self.key(), self.integer(), self.integer()],
            lambda: [b"APPEND", self.key(), self.value()],
            lambda: [b"SETRANGE", self.key(), self.pick([*INTEGERS, b"3", b"45"]), self.value()],
            lambda: [b"SUBSTR", self.key(), self.integer(), self.integer()],
            lambda: [self.pick([b"RENAME", b"RENAMENX"]), self.key(), self.key()],
            lambda: [b"COPY", self.key(), self.key(),
                     *self.pick([[], [b"REPLACE"], [b"DB", b"0"], [b"DB", b"1"], [b"DB"], [b"DB", b"x"], [b"FOO"],
                                 [b"DB", b"4294967296"], [b"REPLACE", b"DB", b"0"]])],
            lambda: [b"TOUCH", *self.keys()],
            lambda: [b"INCRBYFLOAT", self.key(), self.pick(FLOATS)],
            lambda: [b"MEMORY", self.pick([b"USAGE", b"usage", b"FOO", b"PURGE", b"STATS"]),
                     *self.pick([[], [self.key()], [self.key(), b"SAMPLES", self.integer()], [self.key(), b"FOO"]])],
            lambda: [self.pick([b"INCRBY", b"DECRBY"]), self.key(), self.integer()],
            lambda: [b"KEYS", self.glob()],
            lambda: [b"SCAN", b"0", b"MATCH", self.glob(), b"COUNT", b"1000"],
            lambda: [b"SCAN", b"0", b"COUNT", b"1000", *self.pick([[], [b"TYPE", b"string"], [b"TYPE", b"list"]])],
            lambda: [b"SCAN", self.pick([b"abc", b"-1", b"", b"+0", b"18446744073709551616", b" 1"]),
                     *self.pick([[], [b"COUNT"], [b"COUNT", b"0"], [b"COUNT", b"x"], [b"MATCH"], [b"FOO", b"1"]])],
            lambda: [b"ECHO", self.value()],
            lambda: [b"PING", *self.pick([[], [self.value()]])],
            lambda: [b"SELECT", self.pick([b"0", b"16", b"abc", b"-1"])],
            lambda: [b"RANDOMKEY"],
            lambda: [b"DBSIZE"],
            lambda: [b"FLUSHDB"] if self.rng.random() < 0.05 else [b"PING"],
            lambda: [self.pick([b"FOO", b"get2", b"\x00x"]), *self.keys()],
            lambda: [b"MULTI"], lambda: [b"EXEC"], lambda: [b"DISCARD"], lambda: [b"WATCH", *self.keys()],
            lambda: [b"UNWATCH"],
            lambda: [b"CLIENT", self.pick([b"SETNAME", b"GETNAME", b"setname", b"FOO"]),
                     *self.pick([[], [b"x"], [b"a b"], [b""], [b"x", b"y"]])],
            lambda: [b"CONFIG", self.pick([b"FOO", b"GET", b"SET", b"RESETSTAT"]),
                     *self.pick([[], [b"nonexistent-param"], [b"a", b"b", b"c"]])],
            lambda: [b"CONFIG", b"SET", *self.pick([[b"nonexistent-param", b"1"], [b"maxclients", b"5000"],
                     [b"maxmemory", b"1gb", b"MAXMEMORY", b"2gb"], [b"maxmemory", b"1gb", b"foo", b"1"],
                     [b"foo\x00bar", b"1"], [b"maxmemory", b"1gb"]])],
            lambda: [b"HELLO", self.pick([b"2", b"3", b"4", b"0", b"abc"]),
                     *self.pick([[], [], [b"SETNAME"], [b"FOO"]])],
            lambda: [b"AUTH", *self.pick([[b"x"], [b"default", b"x"], [b"a", b"b", b"c"]])],
            # Replication without replicas; MOVE and SWAPDB with one database; diagnostics whose replies do not
            # depend on timing (WAIT 1 blocks for its 2 ms on both servers, or not at all inside MULTI).
            lambda: [b"ROLE", *self.pick([[], [b"x"]])],
            lambda: self.pick([[b"WAIT", self.pick([b"0", b"-3", b"x"]), self.pick([b"0", b"-1", b"x", b"5"])],
                               [b"WAIT", b"1", b"2"], [b"WAIT", b"0"]]),
            lambda: [b"MOVE", self.key(), self.pick([b"0", b"1", b"-1", b"x", b"99999999999"])],
            lambda: [b"SWAPDB", self.pick([b"0", b"1", b"x", b"-1"]), self.pick([b"0", b"1", b"x"])],
            # Client-side caching, never switched on: invalidation pushes would change how many replies a request
            # gets (test_tracking.py compares those); here the options' checks and the replies about the state.
            lambda: [b"CLIENT", *self.pick([[b"GETREDIR"], [b"TRACKINGINFO"], [b"CACHING", b"YES"], [b"CACHING", b"x"],
                                            [b"TRACKING", b"OFF"], [b"TRACKING", b"ON", b"PREFIX", b"a"],
                                            [b"TRACKING", b"ON", b"OPTIN", b"OPTOUT"], [b"TRACKING", b"MAYBE"],
                                            [b"TRACKING", b"ON", b"REDIRECT", b"999999"], [b"TRACKING"],
                                            [b"TRACKING", b"ON", b"BCAST", b"PREFIX", b"ab", b"PREFIX", b"a"],
                                            [b"TRACKING", b"ON", b"REDIRECT", b"x"], [b"GETREDIR", b"x"]])],
            lambda: [b"CLIENT", b"UNBLOCK", *self.pick([[b"99999"], [b"x"], [b"1", b"foo"], [b"1", b"TIMEOUT"],
                                                       [b"x", b"ERROR"], [], [b"1", b"2", b"3"]])],
            lambda: [b"LATENCY", *self.pick([[b"LATEST"], [b"HISTORY", b"command"], [b"RESET"], [b"RESET", b"a"],
                                            [b"GRAPH", b"command"], [b"FOO"], [b"HISTOGRAM", b"nosuch"],
                                            [b"LATEST", b"x"], [b"HISTORY"], []])],
            lambda: [b"DUMP", self.key()],
            # TTLs: none, bad, 100 s, and 2001-09-09 (past with ABSTTL, decades ahead without it); never a
            # deadline milliseconds away, which the two servers would see at different moments.
            lambda: [b"RESTORE", self.key(), self.pick([b"0", b"-1", b"x", b"100000", b"1000000000000"]),
                     self.pick(PAYLOADS),
                     *self.pick([[], [b"REPLACE"], [b"ABSTTL"], [b"REPLACE", b"ABSTTL"], [b"IDLETIME", b"5"],
                                 [b"FREQ", b"300"], [b"IDLETIME", b"1", b"FREQ", b"1"], [b"FOO"], [b"IDLETIME"]])],
            lambda: [self.pick([b"PUBLISH", b"SPUBLISH"]), self.key(), *self.pick([[self.value()], [], [b"a", b"b"]])],
            lambda: [b"PUBSUB", *self.pick([[b"CHANNELS"], [b"CHANNELS", self.glob()], [b"NUMSUB", *self.keys()],
                                           [b"NUMPAT"], [b"SHARDCHANNELS"], [b"SHARDNUMSUB", self.key()], [b"FOO"],
                                           [b"CHANNELS", b"a", b"b"], [b"NUMPAT", b"x"], []])],
            lambda: [b"SETBIT", self.key(), self.pick(BIT_OFFSETS), self.pick([b"0", b"1", b"1", b"2", b"-1", b"x"])],
            lambda: [b"GETBIT", self.key(), self.pick(BIT_OFFSETS)],
            lambda: [b"BITCOUNT", self.key(), *self.pick([[], [], [self.integer()], [self.integer(), self.integer()],
                     [self.integer(), self.integer(), self.pick([b"BIT", b"byte", b"FOO", b"bit"])],
                     [b"0", b"-1", b"BIT", b"x"]])],
            lambda: [b"BITPOS", self.key(), self.pick([b"0", b"1", b"1", b"2", b"x"]),
                     *self.pick([[], [self.integer()], [self.integer(), self.integer()],
                                 [self.integer(), self.integer(), self.pick([b"BIT", b"BYTE", b"FOO"])],
                                 [self.integer(), b"x", b"FOO"], [b"0", b"-1", b"BIT", b"x"]])],
            lambda: [b"BITOP", self.pick([b"AND", b"OR", b"XOR", b"NOT", b"not", b"FOO"]), self.key(), *self.keys()],
            self.bitfield, self.bitfield,
            # HyperLogLogs on the same keys as every other command: sketches grow sparse and dense, strings that are
            # not sketches are WRONGTYPE, and APPEND, SETRANGE or SETBIT on a sketch make corrupt ones.
            self.pfadd, self.pfadd,
            lambda: [b"PFCOUNT", *self.keys()],
            lambda: [b"PFMERGE", self.key(), *self.keys()],
            lambda: [b"PFDEBUG", self.pick([b"ENCODING", b"DECODE", b"decode", b"TODENSE", b"GETREG", b"FOO"]),
                     *self.pick([[self.key()], [self.key()], [], [self.key(), b"x"]])],
            # OBJECT: not REFCOUNT (Redis shares small integers only without a memory limit, which kvd always has)
            # nor HELP (each server's own text); IDLETIME compared as an integer, the seconds are each server's.
            lambda: [b"OBJECT", self.pick([b"ENCODING", b"encoding", b"IDLETIME", b"FREQ", b"FOO"]),
                     *self.pick([[self.key()], [self.key()], [], [self.key(), b"x"]])],
            lambda: [self.pick([b"SORT", b"SORT_RO"]), self.key(),
                     *self.pick([[], [b"DESC", b"ALPHA"], [b"LIMIT", self.integer(), self.integer()], [b"LIMIT", b"0"],
                                 [b"STORE", self.key()], [b"BY", b"nosort", b"GET", b"#"], [b"GET"], [b"FOO"],
                                 [b"BY", b"w_*", b"LIMIT", b"0", b"10", b"STORE", self.key()], [b"store", b"x"]])],
            lambda: [b"LCS", self.key(), self.key(),
                     *self.pick([[], [b"LEN"], [b"IDX"], [b"idx", b"WITHMATCHLEN"], [b"LEN", b"IDX"], [b"FOO"],
                                 [b"IDX", b"MINMATCHLEN", self.integer()], [b"MINMATCHLEN"], [b"WITHMATCHLEN"],
                                 [b"IDX", b"MINMATCHLEN", b"2", b"WITHMATCHLEN"], [b"LEN", b"LEN"]])],
            lambda: [b"ACL", *self.pick([[b"WHOAMI"], [b"USERS"], [b"LIST"], [b"CAT"], [b"CAT", b"nosuch"],
                                        [b"GETUSER", b"default"], [b"GETUSER", self.key()], [b"DELUSER", self.key()],
                                        [b"DRYRUN", b"default", self.pick(NAMES), *self.keys()], [b"LOG", b"0"],
                                        [b"DRYRUN", self.key(), b"get", b"k"], [b"GENPASS", self.integer()], [b"FOO"],
                                        [b"WHOAMI", b"x"], []])],
            lambda: [b"REPLCONF", *self.pick([[b"listening-port", self.integer()], [b"capa", b"eof"], [b"FOO", b"1"],
                                             [b"rdb-only", self.integer()], [b"listening-port"], []])],
            # REPLICAOF with a valid port would make redis-server a replica: only NO ONE and ports Redis refuses
            lambda: [self.pick([b"REPLICAOF", b"SLAVEOF"]),
                     *self.pick([[b"NO", b"ONE"], [b"no", b"one"], [b"NO"], [b"h", self.pick(BAD_PORTS)]])],
            lambda: [b"FAILOVER", *self.pick([[], [b"ABORT"], [b"TIMEOUT", self.integer()], [b"FORCE", b"FORCE"],
                                             [b"TO", b"h", self.integer()], [b"FOO"]])],
            lambda: [b"SLOWLOG", *self.pick([[b"GET", b"-2"], [b"GET", b"x"], [b"GET", b"1", b"2"], [b"FOO"],
                                            [b"LEN", b"x"], [b"RESET", b"x"], [b"GET", b"0"], []])],
        ]  # fmt: skip

    def pick(self, options: list[Any]) -> Any:
        return self.rng.choice(options)

    def key(self) -> bytes:
        return self.pick(KEYS)

    def keys(self) -> list[bytes]:
        return [self.key() for _ in range(self.rng.randint(0, 4))]

    def value(self) -> bytes:
        return self.pick(VALUES)

    def integer(self) -> bytes:
        return self.pick(INTEGERS)

    def pairs(self) -> list[bytes]:
        out = [x for _ in range(self.rng.randint(0, 3)) for x in (self.key(), self.value())]
        return out + self.pick([[], [self.key()]])  # sometimes one short: an arity error

    def deadline(self) -> bytes:
        now = int(time.time())
        return self.pick([b"%d" % (now + 100000), b"%d" % (now - 10), b"1", b"0", b"-1", b"abc",
                          b"%d" % ((now + 100000) * 1000)])  # fmt: skip

    def glob(self) -> bytes:
        return bytes(self.pick(b"k01{}[]^-*?\\a") for _ in range(self.rng.randint(0, 6)))

    def set_(self) -> Request:
        options = [[b"NX"], [b"XX"], [b"GET"], [b"EX", self.pick(DURATIONS)], [b"PX", self.pick(DURATIONS)],
                   [b"EXAT", self.deadline()], [b"PXAT", self.deadline()], [b"KEEPTTL"], [b"nx"], [b"BOGUS"], [b"EX"],
                   [b"ex", b"100000"]]  # fmt: skip
        request = [b"SET", self.key(), self.value()]
        for _ in range(self.pick([0, 0, 1, 1, 2, 3])):
            request += self.pick(options)
        return request

    def pfadd(self) -> Request:
        """A few elements, or a few hundred (a sparse sketch of the default 3000 bytes turns dense after about a
        thousand); the element names come from a small set, so that repeats change nothing."""
        count = self.pick([0, 1, 3, 10, 300])
        return [b"PFADD", self.key(), *(b"e%d" % self.rng.randrange(2000) for _ in range(count))]

    def bitfield(self) -> Request:
        request = [self.pick([b"BITFIELD", b"BITFIELD", b"BITFIELD_RO"]), self.key()]
        for _ in range(self.pick([0, 1, 1, 2, 3, 4])):
            kind = self.pick([b"GET", b"GET", b"SET", b"INCRBY", b"OVERFLOW", b"FOO"])
            if kind == b"OVERFLOW":
                request += [kind, self.pick([b"WRAP", b"SAT", b"FAIL", b"fail", b"FOO"])]
            elif kind == b"FOO":
                request += [kind]
            else:
                request += [kind, self.pick(FIELD_TYPES), self.pick(BIT_OFFSETS[:14])]
                if kind != b"GET":
                    request.append(self.pick([*INTEGERS, b"255", b"-128", b"127", b"-9223372036854775807"]))
        return request

    def expire(self) -> Request:
        name = self.pick([b"EXPIRE", b"PEXPIRE", b"EXPIREAT", b"PEXPIREAT"])
        request = [name, self.key(), self.deadline() if name.endswith(b"AT") else self.pick(DURATIONS)]
        for _ in range(self.pick([0, 0, 1, 2])):
            request.append(self.pick([b"NX", b"XX", b"GT", b"LT", b"gt", b"FOO"]))
        return request

    def getex(self) -> Request:
        options = [[b"EX", self.pick(DURATIONS)], [b"PX", self.pick(DURATIONS)], [b"EXAT", self.deadline()],
                   [b"PXAT", self.deadline()], [b"PERSIST"], [b"FOO"], [b"EX"]]  # fmt: skip
        request = [b"GETEX", self.key()]
        for _ in range(self.pick([0, 1, 1, 2])):
            request += self.pick(options)
        return request

    def arity(self) -> Request:
        """Any command with 0-7 random arguments: arity errors, and every handler on odd input. Commands that
        take a relative expiry get only keys and DURATIONS, never a deadline a step or two away."""
        name = self.pick(NAMES)
        timed = name in (b"setex", b"psetex", b"expire", b"pexpire")

        def argument() -> bytes:
            if timed:
                return self.pick([self.key(), self.pick(DURATIONS)])
            return self.pick([self.key(), self.value(), self.integer()])

        return [name.upper() if self.rng.random() < 0.5 else name] + [
            argument() for _ in range(self.pick([0, 1, 1, 2, 3, 4, 5, 7]))
        ]

    def request(self) -> Request:
        return self.pick(self.productions)()


# -- comparing replies ----------------------------------------------------------------------------------------


def normalise(request: Request, reply: bytes, queued: list[Request]) -> Any:
    """The part of ``reply`` both servers must agree on (see the module docstring for each rule)."""
    name = request[0].upper() if request else b""
    if reply.startswith(b"-NOAUTH HELLO"):  # kvd words it as Redis 7.2 does ("HELLO <proto> AUTH"), 7.0 without
        return reply.replace(b"HELLO <proto> AUTH", b"HELLO AUTH")
    if reply[:1] in (b"-", b"!") or reply in (b"+QUEUED\r\n", CLOSED):
        return reply
    if name == b"EXEC" and reply[:1] == b"*" and queued and reply != b"*-1\r\n":
        out, pos = [], reply.index(b"\r\n") + 2
        for inner in queued:
            end = reply_end(reply, pos)
            if end is None:
                return reply
            out.append(normalise(inner, reply[pos:end], []))
            pos = end
        return ("EXEC", out)
    value = parse(reply)
    if name in (b"TTL", b"PTTL", b"EXPIRETIME", b"PEXPIRETIME") and isinstance(value, int) and value > 0:
        return (name, round(value / (1000 if name.startswith(b"P") else 1)))
    if name == b"KEYS":
        return (name, sorted(value))
    if name == b"SCAN":
        return (name, value[0], sorted(value[1])) if b"1000" in request else (name, len(value))
    if name == b"RANDOMKEY":
        return (name, value is None)
    if name == b"DBSIZE":
        return (name,)
    if name == b"DUMP" and value is not None:  # Redis LZF-compresses strings over 20 bytes; kvd does not
        return (name, load_payload(value))
    if name == b"MEMORY":  # byte counts are each server's own; Redis also counts a key whose deadline passed
        return (name,)
    if name == b"OBJECT" and isinstance(value, int):  # IDLETIME: seconds on each server's own clock
        return (name, "integer")
    if name == b"OBJECT" and value in (b"int", b"embstr"):  # INCRBYFLOAT's "3": embstr in Redis, int in kvd
        return (name, "int or embstr")
    if name == b"ACL" and len(request) > 1 and request[1].upper() == b"GENPASS":  # random: its length only
        return (name, len(value))
    if name == b"ACL" and len(request) > 1 and request[1].upper() == b"LOG":  # no refusals here: both empty
        return (name, value)
    if name == b"HELLO":  # server name, version and client id differ; the fields and the protocol must not
        fields = value if isinstance(value, dict) else dict(zip(value[::2], value[1::2], strict=True))
        return (name, sorted(fields), fields[b"proto"])
    return reply


CLOSED = b"<closed>"


def _ask(conn: RawConnection, request: Request) -> bytes:
    """The reply to ``request``, or CLOSED when the server closed the connection. A server closing after a
    protocol error may reset the connection before its error reply can be read, so only the close counts."""
    try:
        conn.send_command(*request)
    except OSError:
        return CLOSED
    try:
        reply = conn.read_reply()
    except (ConnectionClosed, OSError):
        return CLOSED
    return CLOSED if reply.startswith(b"-ERR Protocol error") else reply


class Pair:
    """The same request to kvd and to redis-server, replies compared; the history makes a failure readable."""

    def __init__(self, kvd: ServerProcess, redis: ServerProcess, seed: int) -> None:
        self.servers = (kvd, redis)
        self.seed = seed
        self.main = tuple(s.raw(timeout=10) for s in self.servers)
        self.other = tuple(s.raw(timeout=10) for s in self.servers)  # writes between WATCH and EXEC
        self.history: list[tuple[str, Request]] = []
        self.queued: list[Request] = []

    def close(self) -> None:
        for conn in self.main + self.other:
            conn.close()

    def both(self, conns: tuple[RawConnection, RawConnection], request: Request, label: str, step: int) -> None:
        self.history.append((label, request))
        replies = [_ask(conn, request) for conn in conns]
        if CLOSED in replies and label == "main":  # a protocol error (an unauthenticated 300 000 byte value)
            self.main = tuple(s.raw(timeout=10) for s in self.servers)
            self.queued = []
        name = request[0].upper()
        if label == "main":
            if name == b"MULTI" and replies[0] == b"+OK\r\n":
                self.queued = []
            elif replies[0] == b"+QUEUED\r\n":
                self.queued.append(request)
        kvd, redis = (normalise(request, r, self.queued if label == "main" else []) for r in replies)
        if label == "main" and name in (b"EXEC", b"DISCARD", b"RESET"):
            self.queued = []
        if kvd != redis:
            before = "\n".join(f"    {lab}: {req!r}" for lab, req in self.history[-HISTORY - 1 : -1])
            pytest.fail(
                f"seed {self.seed}, step {step}, {label} connection: {request!r}\n"
                f"  kvd:   {replies[0][:400]!r}\n  redis: {replies[1][:400]!r}\nrequests before it:\n{before}",
                pytrace=False,
            )


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    find_tool("redis-server")
    base = Path(tmp_path_factory.mktemp("differential"))
    kvd = ServerProcess(base / "kvd", kind="kvd")
    redis = ServerProcess(base / "redis", kind="redis", databases=1)
    kvd.start()
    try:
        redis.start()
        try:
            yield kvd, redis
        finally:
            redis.stop()
    finally:
        kvd.stop()


@pytest.fixture
def pair(servers: tuple[ServerProcess, ServerProcess], request: pytest.FixtureRequest) -> Iterator[Pair]:
    for server in servers:
        with server.raw() as conn:
            assert conn.command("FLUSHALL") == b"+OK\r\n"
            assert conn.command("CONFIG", "SET", "maxclients", "10000") == b"+OK\r\n"
    p = Pair(*servers, seed=request.node.callspec.params["seed"])
    yield p
    p.close()


def _seeds(default: list[int]) -> list[int]:
    """The seeds to run: ``default``, or ``KVD_DIFFERENTIAL_SEEDS`` (``"1-200"``, ``"7,9"``) for a longer soak."""
    given = os.environ.get("KVD_DIFFERENTIAL_SEEDS", "")
    if not given:
        return default
    seeds: list[int] = []
    for part in given.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


@pytest.mark.parametrize("protocol", [2, 3])
@pytest.mark.parametrize("seed", _seeds([1, 2, 3]))
def test_random_requests_get_the_same_replies(pair: Pair, seed: int, protocol: int) -> None:
    grammar = Grammar(seed * 10 + protocol)
    if protocol == 3:
        pair.both(pair.main, [b"HELLO", b"3"], "main", -1)
    steps = 4000
    for step in range(steps):
        request = grammar.request()
        pair.both(pair.main, request, "main", step)
        if grammar.rng.random() < 0.1:  # where each server finds its keys, and what it does to them
            pair.both(pair.other, [b"COMMAND", b"GETKEYSANDFLAGS", *request], "other", step)
        if grammar.rng.random() < 0.05:  # another client writes: WATCH must see it, EXEC must not be touched
            pair.both(pair.other, grammar.pick([grammar.set_, lambda: [b"DEL", grammar.key()], grammar.expire])(),
                      "other", step)  # fmt: skip
        if step % 50 == 49:
            pair.both(pair.other, [b"KEYS", b"*"], "other", step)


@pytest.mark.parametrize("seed", _seeds([1, 2]))
def test_requests_around_auth_get_the_same_replies(tmp_path: Path, seed: int) -> None:
    """With requirepass: the order of Redis's checks before authentication (unknown command, argument count and
    subcommand come before NOAUTH; a refused EXEC aborts), AUTH and HELLO ... AUTH with right and wrong
    passwords, and RESET, which ends the authentication again."""
    find_tool("redis-server")
    kvd = ServerProcess(tmp_path / "kvd", kind="kvd", requirepass="pw")
    redis = ServerProcess(tmp_path / "redis", kind="redis", databases=1, requirepass="pw")
    kvd.start()
    try:
        redis.start()
        try:
            pair = Pair(kvd, redis, seed)
            grammar = Grammar(seed + 100)
            auth = [[b"AUTH", b"pw"], [b"AUTH", b"default", b"pw"], [b"AUTH", b"nope"], [b"RESET"],
                    [b"HELLO", b"3", b"AUTH", b"default", b"pw"],
                    [b"HELLO", b"2", b"AUTH", b"default", b"no"]]  # fmt: skip
            for step in range(1500):
                request = grammar.pick(auth) if grammar.rng.random() < 0.08 else grammar.request()
                pair.both(pair.main, request, "main", step)
            pair.close()
        finally:
            redis.stop()
    finally:
        kvd.stop()


# -- inline commands and framing --------------------------------------------------------------------------------

INLINE_TOKENS = [b"SET", b"GET", b"PING", b"ECHO", b"DEL", b"MGET", b"EXISTS", b"EXPIRE", b"k", b"v", b"10", b"-1",
                 b'"a b"', b"'c d'", b'"\\x41\\x4g"', b'"\\n\\t\\\\"', b"'it''s'", b'"unterminated', b"'x", b'"a"b',
                 b"'a'b", b"\\", b'""', b"''", b'"\\"q\\""', b"'\\''", b"\t", b"   ", b"\xff", b'"\\xZZ"', b"'\\x41'",
                 b'"\\u1"']  # fmt: skip
FRAMES = [encode("SET", "k", "v"), encode("GET", "k"), encode("MSET", "a", "1", "b", "2"), encode("PING"),
          b"*0\r\n", b"*-1\r\n", encode("SET", "k", "x" * 20)]  # fmt: skip
FRAME_EDITS = [b"*", b"$", b"-", b"0", b"9", b"\r\n", b"\n", b"a", b" ", b"+", b"-1", b"00", b"2147483648",
               b"999999999999", b":"]  # fmt: skip
LONE_CR = re.compile(rb"\r(?!\n)")


def exchange(server: ServerProcess, data: bytes) -> list[bytes]:
    """Every reply to ``data`` followed by a PING, up to the PONG, a close or a quiet half second."""
    with server.raw(timeout=5) as conn:
        conn.send(data + b"\r\n*1\r\n$4\r\nPING\r\n")
        replies: list[bytes] = []
        try:
            while not replies or replies[-1] != b"+PONG\r\n":
                replies.append(conn.read_reply(timeout=0.5))
        except ConnectionClosed:
            replies.append(b"<closed>")
        except TimeoutError:
            replies.append(b"<waiting>")
        return replies


def compare_inputs(servers: tuple[ServerProcess, ServerProcess], inputs: Iterator[bytes], seed: int) -> None:
    for step, data in enumerate(inputs):
        kvd, redis = (exchange(s, data) for s in servers)
        if kvd != redis:
            pytest.fail(f"seed {seed}, input {step}: {data!r}\n  kvd:   {kvd!r}\n  redis: {redis!r}", pytrace=False)
        if b"+OK\r\n" in kvd:  # a SET went through: start the next input from the same empty keyspace
            for s in servers:
                with s.raw() as conn:
                    conn.command("FLUSHALL")


@pytest.mark.parametrize("seed", _seeds([1, 2]))
def test_inline_commands_get_the_same_replies(servers: tuple[ServerProcess, ServerProcess], seed: int) -> None:
    rng = random.Random(seed)

    def lines() -> Iterator[bytes]:
        for _ in range(400):
            yield b"".join(
                rng.choice(INLINE_TOKENS) + rng.choice([b" ", b"  ", b"\t", b""]) for _ in range(rng.randint(0, 5))
            )

    compare_inputs(servers, lines(), seed)


@pytest.mark.parametrize("seed", _seeds([1, 2]))
def test_malformed_framing_gets_the_same_replies(servers: tuple[ServerProcess, ServerProcess], seed: int) -> None:
    rng = random.Random(seed)

    def frames() -> Iterator[bytes]:
        made = 0
        while made < 300:
            data = bytearray(b"".join(rng.choice(FRAMES) for _ in range(rng.randint(1, 2))))
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(data))
                edit = rng.random()
                if edit < 0.4:
                    data[at : at + 1] = rng.choice(FRAME_EDITS)
                elif edit < 0.7:
                    data[at:at] = rng.choice(FRAME_EDITS)
                else:
                    del data[at]
            if LONE_CR.search(data):  # a Redis quirk kvd does not copy (module docstring)
                continue
            made += 1
            yield bytes(data)

    compare_inputs(servers, frames(), seed)


def test_the_grammar_reaches_every_generated_command() -> None:
    """Guard against a grammar that silently stops producing a family: 4000 requests cover every name."""
    grammar = Grammar(1)
    seen = {grammar.request()[0].upper() for _ in range(4000)}
    wanted = {n.upper() for n in NAMES} | {b"MULTI", b"UNWATCH", b"RANDOMKEY", b"FLUSHDB", b"FOO", *OWN_PRODUCTIONS}
    assert wanted <= seen, sorted(wanted - seen)
