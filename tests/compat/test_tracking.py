"""Client-side caching: CLIENT TRACKING's invalidation messages byte for byte as redis-server sends them
(KVD_TEST_TARGET=redis runs every check against redis-server 7.0 too). redis-py's own client-side cache is not
used here: it refuses servers that report a version below 7.4, as kvd (7.2) and redis-server 7.0 do.

"Nothing was sent" is checked by sending PING and reading PONG as the very next reply: an invalidation that
was sent would have come first.
"""

from __future__ import annotations

import time

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

PONG3 = b"+PONG\r\n"


def invalidate(*keys: bytes) -> bytes:
    return b">2\r\n$10\r\ninvalidate\r\n*%d\r\n" % len(keys) + b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in keys)


FLUSHED = b">2\r\n$10\r\ninvalidate\r\n_\r\n"


def resp3(server):
    conn = server.raw()
    conn.command("HELLO", "3")
    return conn


def nothing_pending(conn) -> bool:
    return conn.command("PING") == PONG3


def test_default_mode_invalidates_each_read_key_once(server):
    with resp3(server) as a, server.raw() as b:
        assert a.command("CLIENT", "TRACKING", "ON") == b"+OK\r\n"
        assert a.command("GET", "k") == b"_\r\n"  # a missing key is tracked too
        assert a.command("MGET", "x", "y") == b"*2\r\n_\r\n_\r\n"
        assert b.command("SET", "k", "1") == b"+OK\r\n"
        assert a.read_reply() == invalidate(b"k")
        assert b.command("SET", "k", "2") == b"+OK\r\n"  # forgotten until read again
        assert nothing_pending(a)
        b.command("DEL", "y")  # no key deleted: nothing changed
        assert nothing_pending(a)
        b.command("SET", "y", "v")
        assert a.read_reply() == invalidate(b"y")
        assert parse(a.command("GET", "k")) == b"2"
        b.command("EXPIRE", "k", "100")  # a new deadline is a change
        assert a.read_reply() == invalidate(b"k")


def test_own_writes_are_announced_after_the_reply_unless_noloop(server):
    with resp3(server) as a:
        a.command("CLIENT", "TRACKING", "ON")
        a.command("GET", "k")
        a.send_command("SET", "k", "v")
        assert a.read_reply() == b"+OK\r\n"  # the reply first, then the invalidation
        assert a.read_reply() == invalidate(b"k")
        a.command("CLIENT", "TRACKING", "ON", "NOLOOP")
        a.command("GET", "k")
        assert a.command("SET", "k", "w") == b"+OK\r\n"
        assert nothing_pending(a)


def test_transaction_invalidations_follow_exec(server):
    with resp3(server) as a:
        a.command("CLIENT", "TRACKING", "ON")
        a.command("MGET", "k1", "k2")
        a.command("MULTI")
        a.command("SET", "k1", "a")
        a.command("SET", "k2", "b")
        assert parse(a.command("EXEC")) == ["OK", "OK"]
        assert a.read_replies(2) == [invalidate(b"k1"), invalidate(b"k2")]


def test_rename_invalidates_the_source_then_the_destination(server):
    """Redis's RENAME signals its source key before its destination (renameGenericCommand), whatever order a
    server writes them in."""
    with resp3(server) as a, server.raw() as b:
        b.command("MSET", "src", "1", "dst", "2", "s2", "3")
        a.command("CLIENT", "TRACKING", "ON")
        a.command("MGET", "dst", "src", "s2", "d2")
        assert b.command("RENAME", "src", "dst") == b"+OK\r\n"
        assert a.read_replies(2) == [invalidate(b"src"), invalidate(b"dst")]
        assert b.command("RENAMENX", "s2", "d2") == b":1\r\n"
        assert a.read_replies(2) == [invalidate(b"s2"), invalidate(b"d2")]
        assert nothing_pending(a)


def test_expiry_and_flush_invalidate(server):
    with resp3(server) as a, server.raw() as b:
        b.command("SET", "short", "v", "PX", "50")
        a.command("CLIENT", "TRACKING", "ON")
        a.command("GET", "short")
        time.sleep(0.2)
        b.command("GET", "short")  # expired: deleted on access, if the server has not already
        assert a.read_reply() == invalidate(b"short")
        b.command("FLUSHALL")
        assert a.read_reply() == FLUSHED


def test_bcast_prefixes_and_noloop(server):
    with resp3(server) as a, resp3(server) as b:
        assert a.command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "job:") == b"+OK\r\n"
        b.command("MSET", "user:2", "x", "other", "y", "user:1", "z")
        assert a.read_reply() == invalidate(b"user:1", b"user:2")  # one message per prefix, keys sorted
        assert a.command("CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP", "PREFIX", "tmp:") == b"+OK\r\n"
        a.command("SET", "tmp:1", "own")
        assert nothing_pending(a)
        b.command("SET", "job:9", "v")
        assert a.read_reply() == invalidate(b"job:9")
        info = parse(a.command("CLIENT", "TRACKINGINFO"))
        assert info == {
            b"flags": {b"on", b"bcast", b"noloop"},
            b"redirect": 0,
            b"prefixes": [b"job:", b"tmp:", b"user:"],
        }


def test_optin_tracks_only_after_caching_yes(server):
    with resp3(server) as a, server.raw() as b:
        a.command("CLIENT", "TRACKING", "ON", "OPTIN")
        a.command("GET", "k1")
        assert a.command("CLIENT", "CACHING", "YES") == b"+OK\r\n"
        a.command("GET", "k2")
        a.command("GET", "k3")  # CACHING YES counted for one command
        b.command("MSET", "k1", "1", "k2", "2", "k3", "3")
        assert a.read_reply() == invalidate(b"k2")
        assert nothing_pending(a)


def test_caching_counts_for_a_whole_transaction_and_for_a_command_that_fails(server):
    """As Redis's resetClient: CLIENT CACHING is kept through MULTI and the commands it queues, so every command of
    the EXEC uses it, and is cleared after the EXEC; a command that is refused, unknown or fails uses it up too,
    while a CLIENT command leaves it for the next one."""
    with resp3(server) as a, server.raw() as b:
        b.command("SET", "text", "not a number")
        a.command("CLIENT", "TRACKING", "ON", "OPTIN")
        a.command("CLIENT", "CACHING", "YES")
        assert a.command("MULTI") == b"+OK\r\n"
        a.command("GET", "t1")
        a.command("GET", "t2")
        assert a.command("EXEC") == b"*2\r\n_\r\n_\r\n"
        a.command("GET", "after-exec")  # not tracked: the EXEC used the CACHING up
        a.command("MULTI")
        a.command("CLIENT", "CACHING", "YES")  # queued: it counts from where it runs in the EXEC
        a.command("GET", "t3")
        a.command("EXEC")
        a.command("GET", "after-exec2")
        for failing in (["NOSUCH"], ["GET"], ["INCR", "text"]):  # unknown, refused, failed
            a.command("CLIENT", "CACHING", "YES")
            assert a.command(*failing).startswith(b"-")
            a.command("GET", f"after-{failing[0]}".lower())
        a.command("CLIENT", "CACHING", "YES")
        a.command("CLIENT", "ID")  # a CLIENT command keeps it
        a.command("GET", "t4")
        keys = ["t1", "t2", "after-exec", "t3", "after-exec2", "after-nosuch", "after-get", "after-incr", "t4"]
        b.command("MSET", *[x for k in keys for x in (k, "1")])
        assert a.read_replies(4) == [invalidate(b"t1"), invalidate(b"t2"), invalidate(b"t3"), invalidate(b"t4")]
        assert nothing_pending(a)


def test_caching_no_of_optout_is_kept_through_multi(server):
    with resp3(server) as a, server.raw() as b:
        a.command("CLIENT", "TRACKING", "ON", "OPTOUT")
        a.command("CLIENT", "CACHING", "NO")
        a.command("MULTI")
        a.command("GET", "u1")
        a.command("EXEC")
        a.command("GET", "u2")  # tracked again after the EXEC
        a.command("CLIENT", "CACHING", "NO")
        a.command("NOSUCH")
        a.command("GET", "u3")  # the unknown command used the CACHING NO up
        b.command("MSET", "u1", "1", "u2", "1", "u3", "1")
        assert a.read_replies(2) == [invalidate(b"u2"), invalidate(b"u3")]
        assert nothing_pending(a)


def test_resp2_redirect_to_a_subscriber(server):
    with server.raw() as sink, server.raw() as a, server.raw() as b:
        sink_id = int(sink.command("CLIENT", "ID")[1:-2])
        sink.send_command("SUBSCRIBE", "__redis__:invalidate")
        sink.read_reply()
        assert a.command("CLIENT", "TRACKING", "ON", "REDIRECT", str(sink_id)) == b"+OK\r\n"
        assert a.command("CLIENT", "GETREDIR") == b":%d\r\n" % sink_id
        a.command("GET", "k")
        b.command("SET", "k", "v")
        assert sink.read_reply() == b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
        b.command("FLUSHDB")
        assert sink.read_reply() == b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"


def test_a_redirect_that_went_away_is_reported(server):
    with resp3(server) as a, server.raw() as b:
        sink = server.raw()
        sink_id = int(sink.command("CLIENT", "ID")[1:-2])
        a.command("CLIENT", "TRACKING", "ON", "REDIRECT", str(sink_id))
        a.command("GET", "k")
        sink.close()
        deadline = time.monotonic() + 5
        while b"id=%d " % sink_id in b.command("CLIENT", "LIST") and time.monotonic() < deadline:
            time.sleep(0.01)
        b.command("SET", "k", "v")
        assert a.read_reply() == b">2\r\n$21\r\ntracking-redir-broken\r\n:%d\r\n" % sink_id
        flags = parse(a.command("CLIENT", "TRACKINGINFO"))[b"flags"]
        assert flags == {b"on", b"broken_redirect"}
        assert b" flags=tR " in a.command("CLIENT", "INFO")
        assert b" redir=%d " % sink_id in a.command("CLIENT", "INFO")


def test_option_errors_and_state_replies(server):
    with server.raw() as c:
        assert c.command("CLIENT", "GETREDIR") == b":-1\r\n"
        assert parse(c.command("CLIENT", "TRACKINGINFO")) == [b"flags", [b"off"], b"redirect", -1, b"prefixes", []]
        errors = {
            ("ON", "PREFIX", "a"): b"-ERR PREFIX option requires BCAST mode to be enabled\r\n",
            ("ON", "OPTIN", "OPTOUT"): b"-ERR You can't specify both OPTIN mode and OPTOUT mode\r\n",
            ("ON", "BCAST", "OPTIN"): b"-ERR OPTIN and OPTOUT are not compatible with BCAST\r\n",
            ("ON", "REDIRECT", "999999"): b"-ERR The client ID you want redirect to does not exist\r\n",
            ("ON", "REDIRECT", "x"): b"-ERR value is not an integer or out of range\r\n",
            ("MAYBE",): b"-ERR syntax error\r\n",
            ("ON", "FOO"): b"-ERR syntax error\r\n",
            ("ON", "BCAST", "PREFIX", "ab", "PREFIX", "a"): (
                b"-ERR Prefix 'ab' overlaps with another provided prefix 'a'. Prefixes for a single client must "
                b"not overlap.\r\n"
            ),
        }
        for args, error in errors.items():
            assert c.command("CLIENT", "TRACKING", *args) == error, args
        assert c.command("CLIENT", "CACHING", "YES") == (
            b"-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode "
            b"enabled\r\n"
        )
        c.command("CLIENT", "TRACKING", "ON", "OPTOUT")
        assert c.command("CLIENT", "CACHING", "YES") == (
            b"-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.\r\n"
        )
        assert c.command("CLIENT", "TRACKING", "ON", "BCAST") == (
            b"-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then "
            b"re-enabling it with a different mode.\r\n"
        )
        assert b" flags=t " in c.command("CLIENT", "INFO")
        assert c.command("CLIENT", "TRACKING", "OFF") == b"+OK\r\n"
        assert c.command("CLIENT", "GETREDIR") == b":-1\r\n"


def test_info_counts_tracking(server):
    with resp3(server) as a, resp3(server) as b:
        a.command("CLIENT", "TRACKING", "ON")
        a.command("MGET", "k1", "k2")
        b.command("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "p")
        b.command("GET", "k1")  # BCAST clients are not in the table
        info = server.client().info()
        assert info["tracking_clients"] == 2
        assert (info["tracking_total_keys"], info["tracking_total_items"], info["tracking_total_prefixes"]) == (2, 2, 1)
        a.command("RESET")
        assert server.client().info()["tracking_clients"] == 1


@pytest.mark.kvd_only  # the disk tier
def test_a_write_during_a_cold_read_still_invalidates(server_factory):
    """A tracking client's GET of a value on disk lets other clients run while the value is read. A SET that
    lands then must reach the reader as an invalidation after the GET's reply, whichever value the reply
    holds: otherwise the client would keep a stale value in its cache with nothing to tell it."""
    srv = server_factory("--persistence", "yes", "--maxmemory", "4mb")
    r = srv.client()
    filler = {f"fill{i}": bytes([i]) * (1 << 20) for i in range(8)}
    cold_rounds = 0
    with resp3(srv) as a, srv.raw() as b:
        a.command("CLIENT", "TRACKING", "ON")
        for i in range(20):
            r.set("c", b"old%d" % i)
            r.mset(filler)  # pushes "c" out of RAM
            hits = r.info("kvd")["disk_hits"]
            a.send_command("GET", "c")
            b.send_command("SET", "c", b"new%d" % i)
            got = parse(a.read_reply())
            assert b.read_reply() == b"+OK\r\n"
            cold_rounds += r.info("kvd")["disk_hits"] > hits
            if got != b"new%d" % i:
                assert a.read_reply() == invalidate(b"c"), got
            a.send_command("PING")
            while (reply := a.read_reply()) != PONG3:
                assert reply == invalidate(b"c")  # at most the one for a key already re-read
    assert cold_rounds >= 5


def test_the_table_is_bounded_by_tracking_table_max_keys(server):
    """Past the limit a tracked key is invalidated and forgotten (Redis picks one at random, kvd the oldest),
    so the client never holds a cached value the server no longer watches for it."""
    with resp3(server) as a, server.raw() as admin:
        assert admin.command("CONFIG", "SET", "tracking-table-max-keys", "2") == b"+OK\r\n"
        a.command("CLIENT", "TRACKING", "ON")
        a.command("MGET", "k1", "k2", "k3")
        a.send_command("PING")
        dropped = parse(a.read_reply())
        assert dropped[0] == b"invalidate" and len(dropped[1]) == 1 and dropped[1][0] in (b"k1", b"k2", b"k3")
        assert a.read_reply() == PONG3
        assert server.client().info()["tracking_total_keys"] == 2
