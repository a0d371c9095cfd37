"""Publish/subscribe byte for byte as redis-server sends it, and through redis-py's PubSub in both protocols
(KVD_TEST_TARGET=redis runs every check against redis-server 7.0 too)."""

from __future__ import annotations

import socket
import time

import pytest
from support.raw import encode, parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]

ONLY = (
    b"-ERR Can't execute '%s': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this "
    b"context\r\n"
)


def msg(*parts: bytes, push: bool = False) -> bytes:
    return (b">%d\r\n" if push else b"*%d\r\n") % len(parts) + b"".join(
        b":%d\r\n" % p if isinstance(p, int) else b"$-1\r\n" if p is None else b"$%d\r\n%s\r\n" % (len(p), p)
        for p in parts
    )


def test_subscribe_publish_and_the_resp2_context(server):
    with server.raw() as sub, server.raw() as pub:
        sub.send_command("SUBSCRIBE", "a", "b", "a")  # "a" twice: confirmed twice, counted once
        assert sub.read_replies(3) == [
            msg(b"subscribe", b"a", 1),
            msg(b"subscribe", b"b", 2),
            msg(b"subscribe", b"a", 2),
        ]
        sub.send_command("PSUBSCRIBE", "a*", "?")
        assert sub.read_replies(2) == [msg(b"psubscribe", b"a*", 3), msg(b"psubscribe", b"?", 4)]
        # RESP2 allows only a few commands here; the usual checks come first.
        assert sub.command("GET", "x") == ONLY % b"get"
        assert sub.command("CLIENT", "LIST") == ONLY % b"client|list"
        assert sub.command("GET") == b"-ERR wrong number of arguments for 'get' command\r\n"
        assert sub.command("PING") == msg(b"pong", b"")
        assert sub.command("PING", "hi") == msg(b"pong", b"hi")
        # A channel's subscribers first, then each matching pattern: "a" matches "a*" and "?".
        assert pub.command("PUBLISH", "a", "m1") == b":3\r\n"
        first, *by_pattern = sub.read_replies(3)  # patterns in the server's own order (Redis: its hash order)
        assert first == msg(b"message", b"a", b"m1")
        assert sorted(by_pattern) == sorted([msg(b"pmessage", b"a*", b"a", b"m1"), msg(b"pmessage", b"?", b"a", b"m1")])
        assert pub.command("PUBLISH", "nobody", "m") == b":0\r\n"
        assert sorted(parse(pub.command("PUBSUB", "CHANNELS"))) == [b"a", b"b"]
        assert parse(pub.command("PUBSUB", "CHANNELS", "a*")) == [b"a"]
        assert parse(pub.command("PUBSUB", "NUMSUB", "a", "c")) == [b"a", 1, b"c", 0]
        assert pub.command("PUBSUB", "NUMPAT") == b":2\r\n"
        sub.send_command("UNSUBSCRIBE", "b", "never")
        assert sub.read_replies(2) == [msg(b"unsubscribe", b"b", 3), msg(b"unsubscribe", b"never", 3)]
        sub.send_command("PUNSUBSCRIBE")  # every pattern, in the server's order, counting down
        gone = [parse(r) for r in sub.read_replies(2)]
        assert sorted(g[1] for g in gone) == [b"?", b"a*"] and [g[0] for g in gone] == [b"punsubscribe"] * 2
        assert [g[2] for g in gone] == [2, 1]
        assert sub.command("UNSUBSCRIBE") == msg(b"unsubscribe", b"a", 0)  # the last one: the context ends
        assert sub.command("UNSUBSCRIBE") == msg(b"unsubscribe", None, 0)
        assert sub.command("GET", "x") == b"$-1\r\n"
        assert pub.command("PUBSUB", "NUMSUB", "a") == msg(b"a", 0)


def test_resp3_subscribers_get_pushes_and_may_run_anything(server):
    with server.raw() as sub, server.raw() as pub:
        assert sub.command("HELLO", "3").startswith(b"%")
        assert sub.command("SUBSCRIBE", "a") == msg(b"subscribe", b"a", 1, push=True)
        assert sub.command("SSUBSCRIBE", "s") == msg(b"ssubscribe", b"s", 1, push=True)  # counted apart
        assert sub.command("SET", "k", "v") == b"+OK\r\n"
        assert sub.command("PING") == b"+PONG\r\n"
        assert pub.command("PUBLISH", "a", "hi") == b":1\r\n"
        assert sub.read_reply() == msg(b"message", b"a", b"hi", push=True)
        assert pub.command("SPUBLISH", "s", "yo") == b":1\r\n"
        assert sub.read_reply() == msg(b"smessage", b"s", b"yo", push=True)
        assert pub.command("PUBLISH", "s", "no") == b":0\r\n"  # shard channels are a namespace of their own
        assert parse(pub.command("PUBSUB", "SHARDCHANNELS")) == [b"s"]
        assert parse(pub.command("PUBSUB", "SHARDNUMSUB", "s", "a")) == [b"s", 1, b"a", 0]
        line = parse(sub.command("CLIENT", "INFO")).decode()  # CLIENT LIST's line for this client
        assert " flags=P " in line and " sub=1 psub=0 ssub=1 " in line and " multi=-1 " in line
        assert sub.command("MULTI") == b"+OK\r\n" and sub.command("GET", "k") == b"+QUEUED\r\n"
        line = parse(pub.command("CLIENT", "LIST")).decode()
        assert any(" flags=Px " in row and " multi=1 " in row for row in line.splitlines())
        assert sub.command("DISCARD") == b"+OK\r\n"
        # Its own message comes before the reply to its PUBLISH, as in Redis.
        sub.send_command("PUBLISH", "a", "self")
        assert sub.read_replies(2) == [msg(b"message", b"a", b"self", push=True), b":1\r\n"]
        # Back to RESP2 with subscriptions: the pub/sub context applies.
        assert sub.command("HELLO", "2").startswith(b"*14")
        assert sub.command("GET", "k") == ONLY % b"get"
        assert sub.command("RESET") == b"+RESET\r\n"  # unsubscribes everything
        assert sub.command("GET", "k") == b"$1\r\nv\r\n"
        assert parse(pub.command("PUBSUB", "NUMSUB", "a")) == [b"a", 0]
        assert parse(pub.command("PUBSUB", "SHARDNUMSUB", "s")) == [b"s", 0]


def test_messages_reach_a_subscriber_whose_replies_are_off(server):
    with server.raw() as sub, server.raw() as pub:
        assert sub.command("HELLO", "3").startswith(b"%")
        assert sub.command("SUBSCRIBE", "ch") == msg(b"subscribe", b"ch", 1, push=True)
        sub.send_command("CLIENT", "REPLY", "OFF")  # mutes replies, not pushes (Redis's CLIENT_PUSHING)
        assert pub.command("PUBLISH", "ch", "still") == b":1\r\n"
        assert sub.read_reply() == msg(b"message", b"ch", b"still", push=True)
        sub.send_command("GET", "x")  # its reply is dropped
        assert sub.command("CLIENT", "REPLY", "ON") == b"+OK\r\n"


def test_the_resp2_context_holds_from_the_command_after_subscribe_in_the_same_write(server):
    """SUBSCRIBE and a SET in one write: the SET is refused, as on its own. UNSUBSCRIBE and a GET in one write:
    the GET runs. (kvd once chose the rules once per read, so both went the other way.)"""
    with server.raw() as c:
        c.send(b"".join(encode(*r) for r in (["SUBSCRIBE", "x"], ["SET", "k", "v"], ["PING"])))
        assert c.read_replies(3) == [msg(b"subscribe", b"x", 1), ONLY % b"set", b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"]
        c.send(encode("UNSUBSCRIBE", "x") + encode("GET", "k"))
        assert c.read_replies(2) == [msg(b"unsubscribe", b"x", 0), b"$-1\r\n"]


def test_confirmations_reach_a_client_whose_replies_are_off_or_skipped(server):
    """Redis sends (un)subscribe confirmations past CLIENT REPLY OFF and SKIP (CLIENT_PUSHING), in RESP2 and 3."""
    with server.raw() as c:
        c.send(b"".join(encode(*r) for r in (["CLIENT", "REPLY", "OFF"], ["SUBSCRIBE", "x"], ["UNSUBSCRIBE", "x"])))
        assert c.read_replies(2) == [msg(b"subscribe", b"x", 1), msg(b"unsubscribe", b"x", 0)]
        assert c.command("CLIENT", "REPLY", "ON") == b"+OK\r\n"
        assert c.command("HELLO", "3").startswith(b"%")
        c.send(b"".join(encode(*r) for r in (["CLIENT", "REPLY", "SKIP"], ["PSUBSCRIBE", "x*"], ["PING"])))
        assert c.read_replies(2) == [msg(b"psubscribe", b"x*", 1, push=True), b"+PONG\r\n"]


def test_a_subscriber_that_disconnects_is_forgotten(server):
    with server.raw() as pub:
        sub = server.raw()
        sub.send_command("SUBSCRIBE", "gone")
        sub.send_command("PSUBSCRIBE", "g*")
        assert len(sub.read_replies(2)) == 2
        assert parse(pub.command("PUBSUB", "NUMSUB", "gone")) == [b"gone", 1]
        sub.close()
        deadline = time.monotonic() + 5
        while parse(pub.command("PUBSUB", "NUMSUB", "gone")) != [b"gone", 0]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert pub.command("PUBSUB", "NUMPAT") == b":0\r\n"
        assert pub.command("PUBLISH", "gone", "x") == b":0\r\n"


@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_pubsub(server, protocol):
    r = server.client(protocol=protocol)
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("sport.*")
    confirmations = [p.get_message(timeout=5) for _ in range(2)]
    assert [m["type"] for m in confirmations] == ["subscribe", "psubscribe"]
    assert r.publish("news", b"x" * 100_000) == 1  # a large message arrives whole
    assert r.publish("sport.tennis", "ace") == 1
    got = [p.get_message(timeout=5) for _ in range(2)]
    assert got[0]["type"] == "message" and got[0]["data"] == b"x" * 100_000
    assert got[1] == {"type": "pmessage", "pattern": b"sport.*", "channel": b"sport.tennis", "data": b"ace"}
    assert r.pubsub_numsub("news") == [(b"news", 1)]
    assert r.pubsub_numpat() == 1
    p.close()
    r.close()


@pytest.mark.kvd_only  # kvd's own limit setting (Redis has a pubsub class of its own)
def test_a_subscriber_that_never_reads_is_cut_off_at_the_hard_limit(server_factory):
    srv = server_factory(client_output_buffer_soft_limit="1mb", client_output_buffer_hard_limit="4mb")
    with srv.raw() as pub:
        sleeper = srv.raw()
        sleeper.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        assert sleeper.command("SUBSCRIBE", "firehose") == msg(b"subscribe", b"firehose", 1)
        chunk = b"x" * 100_000
        for _ in range(400):  # 40 MB at a client that reads nothing
            if pub.command("PUBLISH", "firehose", chunk) == b":0\r\n":
                break
        assert parse(pub.command("PUBSUB", "NUMSUB", "firehose")) == [b"firehose", 0]
        stats = parse(pub.command("INFO", "stats")).decode()
        assert "client_output_buffer_limit_disconnections:1\r\n" in stats
        sleeper.close()
