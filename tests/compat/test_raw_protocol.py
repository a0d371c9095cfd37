"""Byte-exact protocol behaviour over a plain socket, as Redis 7 does it (docs: shared notes redis-compat.md §1).

Every expected byte string here was checked against Debian's redis-server 7.0 (KVD_TEST_TARGET=redis).
"""

from __future__ import annotations

import hashlib
import os
import re
import time

import pytest
from support.raw import encode, parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


# -- error replies ------------------------------------------------------------------------------------------

ERRORS = [
    pytest.param([b"foo"], b"-ERR unknown command 'foo', with args beginning with: \r\n", id="unknown-no-args"),
    pytest.param(
        [b"foo", b"a", b"b"], b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n", id="unknown-args"
    ),
    pytest.param([b"PING", b"a", b"b"], b"-ERR wrong number of arguments for 'ping' command\r\n", id="arity-ping"),
    pytest.param([b"GET"], b"-ERR wrong number of arguments for 'get' command\r\n", id="arity-get"),
    pytest.param([b"set", b"k"], b"-ERR wrong number of arguments for 'set' command\r\n", id="arity-set"),
    pytest.param([b"SET", b"k", b"v", b"NX", b"XX"], b"-ERR syntax error\r\n", id="syntax-nx-xx"),
    pytest.param([b"SET", b"k", b"v", b"BOGUS"], b"-ERR syntax error\r\n", id="syntax-option"),
    pytest.param(
        [b"SET", b"k", b"v", b"EX", b"abc"], b"-ERR value is not an integer or out of range\r\n", id="not-integer"
    ),
    pytest.param([b"EXPIRE", b"k", b"1.5"], b"-ERR value is not an integer or out of range\r\n", id="expire-float"),
    pytest.param([b"SET", b"k", b"v", b"EX", b"0"], b"-ERR invalid expire time in 'set' command\r\n", id="expire-0"),
    pytest.param(
        [b"SET", b"k", b"v", b"PX", b"-5"], b"-ERR invalid expire time in 'set' command\r\n", id="expire-negative"
    ),
    pytest.param([b"SELECT", b"16"], b"-ERR DB index is out of range\r\n", id="select-16"),
    pytest.param([b"SELECT", b"-1"], b"-ERR DB index is out of range\r\n", id="select-negative"),
    pytest.param([b"SELECT", b"abc"], b"-ERR value is not an integer or out of range\r\n", id="select-nan"),
    pytest.param([b"SCAN", b"abc"], b"-ERR invalid cursor\r\n", id="scan-cursor"),
    pytest.param(
        [b"AUTH", b"pw"],
        b"-ERR AUTH <password> called without any password configured for the default user. "
        b"Are you sure your configuration is correct?\r\n",
        id="auth-without-password",
    ),
    pytest.param([b"HELLO", b"4"], b"-NOPROTO unsupported protocol version\r\n", id="hello-4"),
    pytest.param(
        [b"HELLO", b"x"], b"-ERR Protocol version is not an integer or out of range\r\n", id="hello-not-integer"
    ),
    pytest.param([b"HELLO", b"3", b"BOGUS"], b"-ERR Syntax error in HELLO option 'BOGUS'\r\n", id="hello-option"),
    # found by test_differential.py; each checked against redis-server 7.0.15
    pytest.param([b"DECRBY", b"k", b"-9223372036854775808"], b"-ERR decrement would overflow\r\n", id="decrby-min"),
    pytest.param([b"EXPIRE", b"k", b"abc", b"FOO"], b"-ERR Unsupported option FOO\r\n", id="expire-option-first"),
    pytest.param(
        [b"EXPIRE", b"k", b"abc", b"NX", b"GT"],
        b"-ERR NX and XX, GT or LT options at the same time are not compatible\r\n",
        id="expire-options-before-amount",
    ),
    pytest.param([b"SCAN", b"-1", b"COUNT"], b"-ERR syntax error\r\n", id="scan-negative-cursor-wraps"),
    pytest.param([b"SCAN", b" 1"], b"-ERR invalid cursor\r\n", id="scan-cursor-space"),
    pytest.param([b"SCAN", b"18446744073709551616"], b"-ERR invalid cursor\r\n", id="scan-cursor-range"),
    pytest.param([b"CONFIG", b"SET", b"a", b"b", b"c"], b"-ERR syntax error\r\n", id="config-set-odd"),
    pytest.param(
        [b"CONFIG", b"SET", b"maxmemory", b"1gb", b"no-such", b"1"],
        b"-ERR Unknown option or number of arguments for CONFIG SET - 'no-such'\r\n",
        id="config-set-unknown-first",
    ),
    pytest.param(
        [b"CONFIG", b"SET", b"maxmemory", b"1gb", b"MAXMEMORY", b"2gb"],
        b"-ERR CONFIG SET failed (possibly related to argument 'MAXMEMORY') - duplicate parameter\r\n",
        id="config-set-duplicate",
    ),
    pytest.param(
        [b"EXEC", b"x"],
        b"-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n",
        id="exec-arity",
    ),
    pytest.param(
        [b"foo", b"a\x00b", b"c"],
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'c' \r\n",
        id="unknown-nul-arg",
    ),
]


def test_getex_follows_redis_order_and_repeats(module_server):
    """GETEX: a missing key is a null before its amount is checked; the same option may repeat, the last
    amount winning; two kinds of expiry are a syntax error (all checked against redis-server 7.0.15)."""
    with module_server.raw() as c:
        assert c.command("GETEX", "getex:none", "EX", "-1") == b"$-1\r\n"
        assert c.command("SET", "getex:k", "v") == b"+OK\r\n"
        assert c.command("GETEX", "getex:k", "EX", "-1") == b"-ERR invalid expire time in 'getex' command\r\n"
        assert c.command("GETEX", "getex:k", "PX", "1", "PX", "100000000") == b"$1\r\nv\r\n"
        assert 99_000 <= int(c.command("TTL", "getex:k")[1:-2]) <= 100_000
        assert c.command("GETEX", "getex:k", "EX", "5", "PX", "5") == b"-ERR syntax error\r\n"
        assert c.command("GETEX", "getex:k", "PERSIST", "PERSIST") == b"$1\r\nv\r\n"
        assert c.command("TTL", "getex:k") == b":-1\r\n"


@pytest.mark.parametrize(("argv", "expected"), ERRORS)
def test_error_reply_bytes(module_server, argv, expected):
    with module_server.raw() as c:
        assert c.command(*argv) == expected
        # an error never costs the connection
        assert c.command("PING") == b"+PONG\r\n"


def test_unknown_command_quotes_and_scrubs_long_args(module_server):
    with module_server.raw() as c:
        long_arg = b"x" * 200
        reply = c.command(b"nosuch", long_arg)
        assert reply == b"-ERR unknown command 'nosuch', with args beginning with: '" + b"x" * 128 + b"' \r\n"
        # CR/LF inside user text must never reach the error line
        reply = c.command(b"no\r\nsuch", b"a\nb")
        assert reply == b"-ERR unknown command 'no  such', with args beginning with: 'a b' \r\n"
        assert c.command("PING") == b"+PONG\r\n"


def test_a_request_after_auth_in_the_same_write_has_the_authenticated_limits(server_factory):
    """AUTH (or HELLO ... AUTH, or an inline AUTH) and a request past the unauthenticated limits (11 arguments, a
    20 KB value) in one write: the request runs, as Redis reads one request at a time. Without the AUTH it is the
    protocol error it was. (kvd once parsed the whole write first and closed the connection.)"""
    srv = server_factory(requirepass="pw")
    mset = encode("MSET", *[str(i) for i in range(12)])
    for auth, reply in (
        (encode("AUTH", "pw"), b"+OK\r\n"),
        (b"AUTH pw\r\n", b"+OK\r\n"),
        (encode("HELLO", "2", "AUTH", "default", "pw"), None),
    ):
        with srv.raw() as c:
            c.send(auth + mset + encode("SET", "big", b"x" * 20_000) + encode("STRLEN", "big"))
            first = c.read_reply()
            assert first == reply if reply is not None else first.startswith(b"*14\r\n"), first
            assert c.read_replies(3) == [b"+OK\r\n", b"+OK\r\n", b":20000\r\n"]
    with srv.raw() as c:
        c.send(encode("GET", "x") + mset)
        assert c.read_replies(2) == [
            b"-NOAUTH Authentication required.\r\n",
            b"-ERR Protocol error: unauthenticated multibulk length\r\n",
        ]
        assert c.is_closed(timeout=5)


def test_noauth_and_wrongpass(server_factory):
    srv = server_factory(requirepass="s3cret")
    with srv.raw() as c:
        assert c.command("GET", "k") == b"-NOAUTH Authentication required.\r\n"
        assert c.command("SET", "k", "v") == b"-NOAUTH Authentication required.\r\n"
        assert c.command("UNWATCH") == b"-NOAUTH Authentication required.\r\n"
        # SHUTDOWN is no exception: refused before its arguments are looked at, and the server stays up
        assert c.command("SHUTDOWN", "NOSAVE") == b"-NOAUTH Authentication required.\r\n"
        assert c.command("SHUTDOWN", "bogus") == b"-NOAUTH Authentication required.\r\n"
        assert c.command("PING") == b"-NOAUTH Authentication required.\r\n"
        # Redis checks the command, its argument count and its subcommand before authentication
        assert c.command("GET") == b"-ERR wrong number of arguments for 'get' command\r\n"
        assert c.command("CLIENT", "FOO") == b"-ERR unknown subcommand 'FOO'. Try CLIENT HELP.\r\n"
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of: NOAUTH Authentication required.\r\n"
        assert c.command("AUTH", "wrong") == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        assert (
            c.command("AUTH", "default", "wrong")
            == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        )
        # Redis 7.0 says "the HELLO AUTH <user> <pass> option", 7.2+ "the HELLO <proto> AUTH <user> <pass> option"
        assert re.fullmatch(
            rb"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
            rb"(<proto> )?AUTH <user> <pass> option can be used to authenticate the client and select the RESP "
            rb"protocol version at the same time\r\n",
            c.command("HELLO", "3"),
        )
        assert c.command("AUTH", "s3cret") == b"+OK\r\n"
        assert c.command("SET", "k", "v") == b"+OK\r\n"
    with srv.raw() as c:
        assert c.command("AUTH", "default", "s3cret") == b"+OK\r\n"
        assert c.command("GET", "k") == b"$1\r\nv\r\n"
    with srv.raw() as c:
        reply = c.command("HELLO", "3", "AUTH", "default", "s3cret")
        assert reply.startswith(b"%7\r\n")
        assert c.command("GET", "k") == b"$1\r\nv\r\n"


# -- protocol errors: reply, then close ----------------------------------------------------------------------

PROTOCOL_ERRORS = [
    pytest.param(b"*3000000000\r\n", b"-ERR Protocol error: invalid multibulk length\r\n", id="huge-multibulk"),
    pytest.param(b"*1\r\n$-10\r\n", b"-ERR Protocol error: invalid bulk length\r\n", id="negative-bulk"),
    pytest.param(b"*1\r\n$blabla\r\n", b"-ERR Protocol error: invalid bulk length\r\n", id="nan-bulk"),
    pytest.param(b"*1\r\n$2000000000\r\n", b"-ERR Protocol error: invalid bulk length\r\n", id="bulk-over-limit"),
    pytest.param(b"*blabla\r\n", b"-ERR Protocol error: invalid multibulk length\r\n", id="nan-multibulk"),
    pytest.param(b"*1\r\nfoo\r\n", b"-ERR Protocol error: expected '$', got 'f'\r\n", id="expected-dollar"),
    # Redis prints the byte with %c: a line break shows as a space, another byte as itself
    pytest.param(b"*1\r\n\n\r\n", b"-ERR Protocol error: expected '$', got ' '\r\n", id="expected-dollar-lf"),
    pytest.param(b"*1\r\n\x01\r\n", b"-ERR Protocol error: expected '$', got '\x01'\r\n", id="expected-dollar-01"),
    pytest.param(b'set "a b\r\n', b"-ERR Protocol error: unbalanced quotes in request\r\n", id="unbalanced-double"),
    pytest.param(b"set 'a b\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n", id="unbalanced-single"),
]


@pytest.mark.parametrize(("request_bytes", "expected"), PROTOCOL_ERRORS)
def test_protocol_error_replies_then_closes(module_server, request_bytes, expected):
    with module_server.raw() as c:
        assert c.command("PING") == b"+PONG\r\n"
        c.send(request_bytes)
        assert c.read_reply() == expected
        assert c.is_closed(timeout=5), "the connection must be closed after a protocol error"


def test_commands_before_a_protocol_error_are_answered(module_server):
    with module_server.raw() as c:
        c.send(encode("SET", "pe:k", "1") + encode("GET", "pe:k") + b"*1\r\n$-10\r\n" + encode("PING"))
        assert c.read_replies(3) == [b"+OK\r\n", b"$1\r\n1\r\n", b"-ERR Protocol error: invalid bulk length\r\n"]
        assert c.is_closed(timeout=5)


def test_empty_and_negative_multibulk_are_ignored(module_server):
    with module_server.raw() as c:
        c.send(b"*0\r\n*-10\r\n\r\n" + encode("PING"))
        assert c.read_reply() == b"+PONG\r\n"


# -- RESP2 vs RESP3 ------------------------------------------------------------------------------------------

HELLO3 = re.compile(
    rb"%7\r\n\$6\r\nserver\r\n\$5\r\nredis\r\n\$7\r\nversion\r\n\$(\d+)\r\n([0-9.]+)\r\n"
    rb"\$5\r\nproto\r\n:3\r\n\$2\r\nid\r\n:(\d+)\r\n\$4\r\nmode\r\n\$10\r\nstandalone\r\n"
    rb"\$4\r\nrole\r\n\$6\r\nmaster\r\n\$7\r\nmodules\r\n\*0\r\n"
)
HELLO2 = re.compile(
    rb"\*14\r\n\$6\r\nserver\r\n\$5\r\nredis\r\n\$7\r\nversion\r\n\$(\d+)\r\n([0-9.]+)\r\n"
    rb"\$5\r\nproto\r\n:2\r\n\$2\r\nid\r\n:(\d+)\r\n\$4\r\nmode\r\n\$10\r\nstandalone\r\n"
    rb"\$4\r\nrole\r\n\$6\r\nmaster\r\n\$7\r\nmodules\r\n\*0\r\n"
)


def test_hello_reply_bytes(module_server):
    with module_server.raw() as c:
        reply = c.command("HELLO", "3")
        m = HELLO3.fullmatch(reply)
        assert m, reply
        assert int(m.group(1)) == len(m.group(2))
        assert re.fullmatch(rb"[6-9]\.\d+\.\d+", m.group(2)), m.group(2)
        reply2 = c.command("HELLO", "2")
        m2 = HELLO2.fullmatch(reply2)
        assert m2, reply2
        assert m2.group(3) == m.group(3), "the connection id stays the same"
        assert m2.group(2) == m.group(2)


def test_null_shapes_resp2_vs_resp3(module_server):
    with module_server.raw() as c:
        c.command("DEL", "n:missing")
        assert c.command("SET", "n:here", "v") == b"+OK\r\n"
        assert c.command("GET", "n:missing") == b"$-1\r\n"
        assert c.command("MGET", "n:here", "n:missing") == b"*2\r\n$1\r\nv\r\n$-1\r\n"
        assert c.command("SET", "n:here", "w", "NX") == b"$-1\r\n"
        assert c.command("SET", "n:new1", "w", "GET") == b"$-1\r\n"
        assert c.command("HELLO", "3").startswith(b"%7\r\n")
        assert c.command("GET", "n:missing") == b"_\r\n"
        assert c.command("MGET", "n:here", "n:missing") == b"*2\r\n$1\r\nv\r\n_\r\n"
        assert c.command("SET", "n:here", "w", "NX") == b"_\r\n"
        assert c.command("SET", "n:new2", "w", "GET") == b"_\r\n"
        assert c.command("TTL", "n:missing") == b":-2\r\n"
        assert c.command("TYPE", "n:here") == b"+string\r\n"
        assert c.command("TYPE", "n:missing") == b"+none\r\n"


def test_config_get_is_a_map_in_resp3(module_server):
    with module_server.raw() as c:
        r2 = c.command("CONFIG", "GET", "maxmemory")
        assert re.fullmatch(rb"\*2\r\n\$9\r\nmaxmemory\r\n\$\d+\r\n\d+\r\n", r2), r2
        c.command("HELLO", "3")
        r3 = c.command("CONFIG", "GET", "maxmemory")
        assert re.fullmatch(rb"%1\r\n\$9\r\nmaxmemory\r\n\$\d+\r\n\d+\r\n", r3), r3
        assert r3[2:] == r2[2:]


def test_config_set_refuses_immutable_configs_whatever_the_value(module_server):
    """Redis refuses CONFIG SET of an immutable config even to its current value, and sets none of a batch that
    names one; kvd's one database and its absent module API are immutable there too."""
    with module_server.raw() as c:
        before = c.command("CONFIG", "GET", "maxmemory")
        for name, value in (("databases", "1"), ("enable-module-command", "no")):
            assert (
                c.command("CONFIG", "SET", name, value)
                == (
                    f"-ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config\r\n"
                ).encode()
            )
        assert c.command("CONFIG", "SET", "maxmemory", "7mb", "databases", "1").startswith(b"-ERR CONFIG SET")
        assert c.command("CONFIG", "GET", "maxmemory") == before


def test_redis_s_old_replica_names_are_the_same_settings(module_server):
    """slave-read-only, min-slaves-to-write and the rest of Redis's deprecated names: CONFIG GET answers under the
    name asked, CONFIG SET changes the setting itself, and CONFIG GET * lists both names."""
    pairs = {
        "slave-read-only": "replica-read-only",
        "slave-serve-stale-data": "replica-serve-stale-data",
        "slave-priority": "replica-priority",
        "slave-announce-port": "replica-announce-port",
        "slave-ignore-maxmemory": "replica-ignore-maxmemory",
        "min-slaves-to-write": "min-replicas-to-write",
        "min-slaves-max-lag": "min-replicas-max-lag",
        "repl-ping-slave-period": "repl-ping-replica-period",
    }
    with module_server.raw() as c:
        every = parse(c.command("CONFIG", "GET", "*"))
        names = set(every[::2])
        for old, new in pairs.items():
            assert {old.encode(), new.encode()} <= names
            value = parse(c.command("CONFIG", "GET", new))[1]
            assert parse(c.command("CONFIG", "GET", old)) == [old.encode(), value]
        assert parse(c.command("CONFIG", "GET", "slaveof")) == [b"slaveof", b""]
        try:
            assert c.command("CONFIG", "SET", "slave-priority", "42", "min-slaves-max-lag", "17") == b"+OK\r\n"
            assert parse(c.command("CONFIG", "GET", "replica-priority")) == [b"replica-priority", b"42"]
            assert parse(c.command("CONFIG", "GET", "min-replicas-max-lag")) == [b"min-replicas-max-lag", b"17"]
        finally:
            c.command("CONFIG", "SET", "replica-priority", "100", "min-replicas-max-lag", "10")


def test_hz_is_brought_into_1_to_500_as_redis_does(module_server):
    with module_server.raw() as c:
        try:
            for given, kept in (("100", b"100"), ("1000", b"500"), ("0", b"1")):
                assert c.command("CONFIG", "SET", "hz", given) == b"+OK\r\n"
                assert parse(c.command("CONFIG", "GET", "hz")) == [b"hz", kept]
                info = parse(c.command("INFO", "server")).decode()
                assert f"\r\nhz:{kept.decode()}\r\n" in info and f"\r\nconfigured_hz:{kept.decode()}\r\n" in info
            assert c.command("CONFIG", "SET", "hz", "-1").startswith(
                b"-ERR CONFIG SET failed (possibly related to argument 'hz')"
            )
        finally:
            c.command("CONFIG", "SET", "hz", "10")


def test_scan_reply_shape(module_server):
    with module_server.raw() as c:
        for i in range(5):
            c.command("SET", f"shape:{i}", "x")
        reply = c.command("SCAN", "0", "MATCH", "shape:*", "COUNT", "1000")
        assert reply.startswith(b"*2\r\n$"), reply  # the cursor is a bulk string
        seen: set[bytes] = set()
        cursor, keys = parse(reply)
        seen.update(keys)
        for _ in range(1000):
            if cursor == b"0":
                break
            assert cursor.isdigit(), cursor
            cursor, keys = parse(c.command("SCAN", cursor, "MATCH", "shape:*", "COUNT", "1000"))
            seen.update(keys)
        assert cursor == b"0"
        assert seen == {f"shape:{i}".encode() for i in range(5)}


# -- inline commands ------------------------------------------------------------------------------------------


def test_inline_commands_with_quotes_and_escapes(module_server):
    with module_server.raw() as c:
        assert c.inline(b"PING") == b"+PONG\r\n"
        assert c.inline(b"set \"in line\" 'c d'") == b"+OK\r\n"
        assert c.command("GET", "in line") == b"$3\r\nc d\r\n"
        assert c.inline(b'set inl:hex "\\x41\\x00\\xff\\n\\"q"') == b"+OK\r\n"
        assert c.command("GET", "inl:hex") == b'$6\r\nA\x00\xff\n"q\r\n'
        assert c.inline(b"   get    'in line'   ") == b"$3\r\nc d\r\n"
        c.send(b"PING\n")  # a bare LF ends an inline command too
        assert c.read_reply() == b"+PONG\r\n"
        c.send(b"\r\n\r\n" + b"ECHO hi\r\n")  # empty lines are ignored
        assert c.read_reply() == b"$2\r\nhi\r\n"


# -- QUIT -------------------------------------------------------------------------------------------------


def test_quit_stops_pipelined_commands(module_server):
    with module_server.raw() as c:
        c.send(encode("SET", "quit:k", "before") + encode("QUIT") + encode("SET", "quit:k", "after"))
        assert c.read_replies(2) == [b"+OK\r\n", b"+OK\r\n"]
        assert c.is_closed(timeout=5)
        assert c.buf == b"", f"nothing may follow QUIT's +OK: {bytes(c.buf)!r}"
    with module_server.raw() as c:
        assert c.command("GET", "quit:k") == b"$6\r\nbefore\r\n"
    with module_server.raw() as c:  # nor a protocol error for bad bytes after it: Redis never reads them
        c.send(encode("QUIT") + b"*1\r\n+x\r\n")
        assert c.read_replies(1) == [b"+OK\r\n"]
        assert c.is_closed(timeout=5)
        assert c.buf == b"", f"nothing may follow QUIT's +OK: {bytes(c.buf)!r}"


# -- pipelining and splitting --------------------------------------------------------------------------------


def test_ten_thousand_pipelined_commands_in_one_write(module_server):
    n = 10_000
    parts = []
    expected = []
    for i in range(n):
        if i % 3 == 0:
            parts.append(encode("SET", f"pipe:{i}", str(i)))
            expected.append(b"+OK\r\n")
        elif i % 3 == 1:
            parts.append(encode("GET", f"pipe:{i - 1}"))
            v = str(i - 1).encode()
            expected.append(b"$%d\r\n%s\r\n" % (len(v), v))
        else:
            v = str(i).encode()
            parts.append(encode("ECHO", v))
            expected.append(b"$%d\r\n%s\r\n" % (len(v), v))
    with module_server.raw(timeout=30) as c:
        c.send(b"".join(parts))
        got = c.read_replies(n, timeout=30)
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            assert g == e, f"reply {i}: {g!r} != {e!r}"
        assert c.command("PING") == b"+PONG\r\n"


def test_request_split_at_every_byte_boundary(module_server):
    request = encode("SET", "split:key", "0123456789\r\nabc") + encode("GET", "split:key")
    expected = [b"+OK\r\n", b"$15\r\n0123456789\r\nabc\r\n"]
    started = time.monotonic()
    with module_server.raw() as c:
        for cut in range(1, len(request)):
            c.send(request[:cut])
            time.sleep(0.002)  # let the first part arrive on its own
            c.send(request[cut:])
            assert c.read_replies(2) == expected, f"cut at byte {cut}"
            assert time.monotonic() - started < 40
        # and one request byte by byte
        for b in encode("ECHO", "byte-by-byte"):
            c.send(bytes([b]))
            time.sleep(0.001)
        assert c.read_reply() == b"$12\r\nbyte-by-byte\r\n"
        for b in b"ECHO inline-bytes\r\n":
            c.send(bytes([b]))
            time.sleep(0.001)
        assert c.read_reply() == b"$12\r\ninline-bytes\r\n"


# -- a 64 MiB value ---------------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_64mib_value_round_trip(server):
    size = 64 << 20
    value = os.urandom(size)
    digest = hashlib.sha256(value).hexdigest()
    with server.raw(timeout=60) as c:
        c.send(b"*3\r\n$3\r\nSET\r\n$7\r\nbig:val\r\n$%d\r\n" % size)
        view = memoryview(value)
        for off in range(0, size, 1 << 20):
            c.send(view[off : off + (1 << 20)])
        c.send(b"\r\n")
        assert c.read_reply() == b"+OK\r\n"
        assert c.command("STRLEN", "big:val") == b":%d\r\n" % size
        c.send_command("GET", "big:val")
        assert c.recv_until(b"\r\n") == b"$%d\r\n" % size
        h = hashlib.sha256()
        remaining = size
        while remaining:
            chunk = c.recv_exact(min(remaining, 4 << 20))
            h.update(chunk)
            remaining -= len(chunk)
        assert c.recv_exact(2) == b"\r\n"
        assert h.hexdigest() == digest
        assert c.command("GETRANGE", "big:val", str(size - 4), "-1") == b"$4\r\n" + value[-4:] + b"\r\n"


def test_setrange_and_append_stop_at_proto_max_bulk_len(server):
    """Redis's checkStringLength: a value that SETRANGE or APPEND would grow past proto-max-bulk-len is refused
    and nothing changes (checked against redis-server 7.0.15)."""
    too_long = b"-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n"
    with server.raw() as c:
        assert c.command("CONFIG", "SET", "proto-max-bulk-len", "1mb") == b"+OK\r\n"
        assert c.command("SETRANGE", "k", str(1 << 20), "x") == too_long
        assert c.command("EXISTS", "k") == b":0\r\n"
        assert c.command("SETRANGE", "k", str((1 << 20) - 1), "x") == b":1048576\r\n"
        assert c.command("APPEND", "k", "y") == too_long
        assert c.command("STRLEN", "k") == b":1048576\r\n"
        assert c.command("SETRANGE", "k", "-1", "x") == b"-ERR offset is out of range\r\n"
        assert c.command("SETRANGE", "missing", "5", "") == b":0\r\n"
        assert c.command("EXISTS", "missing") == b":0\r\n"
        assert c.command("SET", "s", "Hello World") == b"+OK\r\n"
        assert c.command("SETRANGE", "s", "6", "Redis") == b":11\r\n"
        assert c.command("SETRANGE", "s", "13", "!") == b":14\r\n"
        assert c.command("GET", "s") == b"$14\r\nHello Redis\x00\x00!\r\n"
        assert c.command("SUBSTR", "s", "0", "4") == b"$5\r\nHello\r\n"


def test_very_long_numbers_are_refused_not_crashed_on(server):
    """Numbers longer than CPython's 4300-digit limit for int() (checked against redis-server 7.0.15)."""
    with server.raw() as c:
        assert c.command("SCAN", "1" * 5000) == b"-ERR invalid cursor\r\n"
        assert c.command("SCAN", "0" * 5000) == b"*2\r\n$1\r\n0\r\n*0\r\n"
        assert c.command("INCRBYFLOAT", "f", "1e" + "9" * 400) == b"-ERR value is not a valid float\r\n"
        assert c.command("INCRBYFLOAT", "f", "1e" + "0" * 5000 + "1") == b"$2\r\n10\r\n"


def test_config_get_answers_an_exact_name_as_written(module_server):
    """Redis answers a name without glob characters as the client wrote it, and each setting once."""
    with module_server.raw() as c:
        value = parse(c.command("CONFIG", "GET", "maxmemory"))[1]
        assert parse(c.command("CONFIG", "GET", "MAXMEMORY")) == [b"MAXMEMORY", value]
        assert parse(c.command("CONFIG", "GET", "MaxMemory", "maxmemory")) == [b"MaxMemory", value]
        assert parse(c.command("CONFIG", "GET", "maxmemor?")) == [b"maxmemory", value]
