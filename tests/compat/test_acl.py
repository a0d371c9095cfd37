"""ACL on a server whose only user is ``default``: the introspection commands answer as Redis's do for that
configuration, ACL LOG records refused logins as Redis records them, and every command's ACL categories are
Redis's (COMMAND INFO, ACL CAT). The tests without ``kvd_only`` pass against redis-server too."""

from __future__ import annotations

import hashlib

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

CATEGORIES = [
    b"keyspace", b"read", b"write", b"set", b"sortedset", b"list", b"hash", b"string", b"bitmap", b"hyperloglog",
    b"geo", b"stream", b"pubsub", b"admin", b"fast", b"slow", b"blocking", b"dangerous", b"connection",
    b"transaction", b"scripting",
]  # fmt: skip


def test_the_default_user_without_a_password(server):
    with server.raw() as raw:
        assert raw.command("ACL", "WHOAMI") == b"$7\r\ndefault\r\n"
        assert raw.command("ACL", "USERS") == b"*1\r\n$7\r\ndefault\r\n"
        assert parse(raw.command("ACL", "LIST")) == [b"user default on nopass ~* &* +@all"]
        assert parse(raw.command("ACL", "GETUSER", "default")) == [
            b"flags", [b"on", b"nopass"], b"passwords", [], b"commands", b"+@all", b"keys", b"~*",
            b"channels", b"&*", b"selectors", [],
        ]  # fmt: skip
        assert raw.command("ACL", "GETUSER", "alice") == b"$-1\r\n"
        assert parse(raw.command("ACL", "CAT")) == CATEGORIES
        assert raw.command("ACL", "CAT", "nosuch") == b"-ERR Unknown category 'nosuch'\r\n"
        assert raw.command("ACL", "DRYRUN", "default", "get", "k") == b"+OK\r\n"
        assert raw.command("ACL", "DRYRUN", "alice", "get", "k") == b"-ERR User 'alice' not found\r\n"
        assert raw.command("ACL", "DRYRUN", "default", "nocmd", "k") == b"-ERR Command 'nocmd' not found\r\n"
        assert raw.command("ACL", "DRYRUN", "default", "get") == (
            b"-ERR wrong number of arguments for 'get' command\r\n"
        )
        assert raw.command("ACL", "DELUSER", "alice") == b":0\r\n"
        assert raw.command("ACL", "DELUSER", "default") == b"-ERR The 'default' user cannot be removed\r\n"
        assert raw.command("ACL", "LOAD").startswith(b"-ERR This Redis instance is not configured to use an ACL")
        assert raw.command("ACL", "SAVE").startswith(b"-ERR This Redis instance is not configured to use an ACL")
        assert raw.command("ACL", "WHOAMI", "x") == b"-ERR wrong number of arguments for 'acl|whoami' command\r\n"
        assert raw.command("ACL", "FOO") == b"-ERR unknown subcommand 'FOO'. Try ACL HELP.\r\n"
        for bits, length in ((None, 64), (1, 1), (5, 2), (32, 8), (4096, 1024)):
            reply = parse(raw.command("ACL", "GENPASS", *([] if bits is None else [bits])))
            assert len(reply) == length and int(reply, 16) >= 0
        for bits in (0, 4097, -1):
            assert raw.command("ACL", "GENPASS", bits).startswith(b"-ERR ACL GENPASS argument must be the number")
        assert raw.command("ACL", "GENPASS", "x") == b"-ERR value is not an integer or out of range\r\n"


def test_the_default_user_with_requirepass(server_factory):
    srv = server_factory(requirepass="s3cret")
    digest = hashlib.sha256(b"s3cret").hexdigest().encode()
    with srv.raw() as raw:
        assert raw.command("AUTH", "s3cret") == b"+OK\r\n"
        assert parse(raw.command("ACL", "LIST")) == [b"user default on #%s ~* &* +@all" % digest]
        user = parse(raw.command("ACL", "GETUSER", "default"))
        assert user[:4] == [b"flags", [b"on"], b"passwords", [digest]]


def test_clearing_requirepass_lets_a_connection_that_never_authenticated_in(server_factory):
    srv = server_factory(requirepass="s3cret")
    with srv.raw() as admin, srv.raw() as other:
        assert other.command("PING").startswith(b"-NOAUTH")
        assert admin.command("AUTH", "s3cret") == b"+OK\r\n"
        assert admin.command("CONFIG", "SET", "requirepass", "") == b"+OK\r\n"
        assert other.command("PING") == b"+PONG\r\n"  # the default user needs no password now
        assert other.command("SET", "k", "v") == b"+OK\r\n"
        other.send_command("SET", "k", "x" * 100_000)  # and the unauthenticated size limits lift with it
        other.send_command("GET", "k")
        assert other.read_replies(2)[0] == b"+OK\r\n"
        # a password set again before it authenticated: NOAUTH again (it never logged in)
        assert admin.command("CONFIG", "SET", "requirepass", "again") == b"+OK\r\n"
        assert other.command("PING").startswith(b"-NOAUTH")
        assert admin.command("PING") == b"+PONG\r\n"


def test_a_password_that_is_not_utf8(server):
    # Redis takes any bytes as requirepass; kvd keeps them as surrogate escapes and must give the bytes back
    digest = hashlib.sha256(b"p\xff").hexdigest().encode()
    with server.raw() as admin, server.raw() as other:
        assert admin.command("CONFIG", "SET", "requirepass", b"p\xff") == b"+OK\r\n"
        try:
            assert other.command("AUTH", b"p\xfe").startswith(b"-WRONGPASS")
            assert other.command("AUTH", b"p\xff") == b"+OK\r\n"
            assert parse(other.command("CONFIG", "GET", "requirepass")) == [b"requirepass", b"p\xff"]
            assert parse(other.command("ACL", "LIST")) == [b"user default on #%s ~* &* +@all" % digest]
        finally:
            assert other.command("CONFIG", "SET", "requirepass", "") == b"+OK\r\n"


def test_acl_log_records_refused_logins(server_factory):
    srv = server_factory(requirepass="s3cret")
    with srv.raw() as raw:
        for _ in range(2):
            assert raw.command("AUTH", "wrong") == b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        assert raw.command("AUTH", "alice", "wrong").startswith(b"-WRONGPASS")
        assert raw.command("HELLO", "2", "AUTH", "default", "nope").startswith(b"-WRONGPASS")
        assert raw.command("AUTH", "s3cret") == b"+OK\r\n"
        entries = [dict(zip(e[::2], e[1::2], strict=True)) for e in parse(raw.command("ACL", "LOG"))]
        assert [(e[b"count"], e[b"object"], e[b"username"]) for e in entries] == [
            (1, b"HELLO", b"default"),
            (1, b"AUTH", b"alice"),
            (2, b"AUTH", b"default"),  # the same refusal twice within a minute: one entry, counted
        ]
        for e in entries:
            assert (e[b"reason"], e[b"context"]) == (b"auth", b"toplevel")
            assert b"cmd=" in e[b"client-info"] and float(e[b"age-seconds"]) < 30
        assert len(parse(raw.command("ACL", "LOG", "1"))) == 1
        assert raw.command("MULTI") == b"+OK\r\n"
        assert raw.command("AUTH", "wrong") == b"+QUEUED\r\n"
        assert raw.command("EXEC").startswith(b"*1\r\n-WRONGPASS")
        latest = parse(raw.command("ACL", "LOG", "1"))[0]
        assert dict(zip(latest[::2], latest[1::2], strict=True))[b"context"] == b"multi"
        stats = parse(raw.command("INFO", "stats")).decode()
        if "acl_access_denied_auth" in stats:  # Redis 7.2's field; Debian's 7.0 has none
            assert "acl_access_denied_auth:5" in stats
        assert raw.command("ACL", "LOG", "RESET") == b"+OK\r\n"
        assert raw.command("ACL", "LOG") == b"*0\r\n"
        assert raw.command("ACL", "LOG", "RESET", "x").startswith(b"-ERR unknown subcommand or wrong number")


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
def test_every_command_has_redis_s_acl_categories(server, redis_server):
    """COMMAND INFO's categories, and ACL CAT's commands per category, as redis-server has them, for every
    command kvd has."""
    with server.raw() as kvd, redis_server.raw() as redis:
        names = sorted(parse(kvd.command("COMMAND", "LIST")))
        compared = 0
        for name in names:
            mine = parse(kvd.command("COMMAND", "INFO", name))[0]
            theirs = parse(redis.command("COMMAND", "INFO", name))[0]
            if theirs is None:  # kvd's own commands (KVD.PREFIXLEN, KVD.REPORT)
                continue
            assert mine[6] == theirs[6], name
            subs = {s[0]: s[6] for s in mine[9]}
            for sub in theirs[9]:
                if sub[0] in subs:
                    assert subs[sub[0]] == sub[6], sub[0]
            compared += 1
        assert compared > 100

        def redis_has(name: bytes) -> bool:  # Debian's 7.0 lacks what 7.2 added (WAITAOF, CLIENT NO-TOUCH)
            return parse(redis.command("COMMAND", "INFO", name))[0] is not None

        for category in CATEGORIES:
            mine = {n for n in parse(kvd.command("ACL", "CAT", category)) if redis_has(n)}
            theirs = set(parse(redis.command("ACL", "CAT", category)))
            assert mine <= theirs, (category, mine - theirs)
            if category not in (b"set", b"sortedset", b"list", b"hash", b"hyperloglog", b"geo", b"stream",
                                b"blocking", b"scripting"):  # fmt: skip
                assert mine, category  # a category kvd has commands in


def test_acl_log_keeps_acllog_max_len_entries(server_factory):
    srv = server_factory(requirepass="s3cret")
    with srv.raw() as raw:
        assert raw.command("AUTH", "s3cret") == b"+OK\r\n"
        assert raw.command("CONFIG", "SET", "acllog-max-len", "2") == b"+OK\r\n"
        for user in ("u1", "u2", "u3"):
            assert raw.command("AUTH", user, "wrong").startswith(b"-WRONGPASS")
        entries = [dict(zip(e[::2], e[1::2], strict=True)) for e in parse(raw.command("ACL", "LOG"))]
        assert [e[b"username"] for e in entries] == [b"u3", b"u2"]  # newest first, the oldest dropped


def test_cat_and_genpass_with_too_many_arguments(server):
    with server.raw() as c:
        for request, sub in ((["ACL", "CAT", "x", "y"], b"CAT"), (["ACL", "genpass", "1", "2"], b"genpass")):
            expected = b"-ERR unknown subcommand or wrong number of arguments for '%s'. Try ACL HELP.\r\n" % sub
            assert c.command(*request) == expected
