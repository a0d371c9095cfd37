"""CLIENT REPLY (ON, OFF, SKIP) and CLIENT PAUSE / UNPAUSE, byte for byte and timing for timing as redis-server
(KVD_TEST_TARGET=redis runs every check against it)."""

from __future__ import annotations

import select
import time

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def test_client_reply_off_on_and_skip(server):
    with server.raw() as c:
        for request in (
            ["CLIENT", "REPLY", "OFF"],  # not answered
            ["SET", "a", "1"],
            ["GET", "a"],
            ["NOSUCH"],  # errors are muted too
            ["CLIENT", "REPLY", "SKIP"],  # ignored while off
            ["CLIENT", "REPLY", "ON"],  # answered: the first reply since OFF
            ["CLIENT", "REPLY", "SKIP"],  # not answered, and neither is the next command
            ["INCR", "a"],
            ["GET", "a"],
            ["CLIENT", "REPLY", "SKIP"],
            ["GET"],  # a refused command counts as the next one
            ["ECHO", "x"],
            ["CLIENT", "REPLY", "SKIP"],
            ["MULTI"],
            ["PING"],
            ["EXEC"],
            ["CLIENT", "REPLY", "maybe"],
            ["CLIENT", "REPLY", "OFF"],
            ["RESET"],  # turns replies back on, and answers
        ):
            c.send_command(*request)
        assert c.read_replies(7) == [
            b"+OK\r\n",
            b"$1\r\n2\r\n",
            b"$1\r\nx\r\n",
            b"+QUEUED\r\n",
            b"*1\r\n+PONG\r\n",
            b"-ERR syntax error\r\n",
            b"+RESET\r\n",
        ]
        assert c.command("PING") == b"+PONG\r\n"


def test_pause_write_holds_writes_and_serves_reads(server):
    with server.raw() as c, server.raw() as admin:
        assert c.command("SET", "k", "before") == b"+OK\r\n"
        assert admin.command("CLIENT", "PAUSE", "400", "WRITE") == b"+OK\r\n"
        started = time.monotonic()
        c.send_command("GET", "k")
        c.send_command("SET", "k", "after")  # waits for the pause to end
        c.send_command("GET", "k")
        assert c.read_reply() == b"$6\r\nbefore\r\n"
        assert time.monotonic() - started < 0.3  # the read before the write was not held
        assert c.read_reply() == b"+OK\r\n"
        assert time.monotonic() - started >= 0.3
        assert c.read_reply() == b"$5\r\nafter\r\n"
        assert admin.command("CLIENT", "PAUSE", "400", "WRITE") == b"+OK\r\n"
        started = time.monotonic()
        assert c.command("SET", "big", b"x" * 300_000) == b"+OK\r\n"  # kvd lands it whole: held all the same
        assert time.monotonic() - started >= 0.3
        assert admin.command("CLIENT", "PAUSE", "400", "WRITE") == b"+OK\r\n"
        c.send_command("MULTI")
        c.send_command("GET", "k")
        assert c.read_replies(2) == [b"+OK\r\n", b"+QUEUED\r\n"]  # reads queue at once
        started = time.monotonic()
        c.send_command("EXEC")  # read only: runs
        assert c.read_reply() == b"*1\r\n$5\r\nafter\r\n" and time.monotonic() - started < 0.3
        assert admin.command("CLIENT", "UNPAUSE") == b"+OK\r\n"


def nothing_arrives(conn, seconds: float) -> bool:
    readable, _, _ = select.select([conn.sock], [], [], seconds)
    return not readable


def test_pause_all_holds_every_client_and_command(server):
    with server.raw() as c, server.raw() as admin, server.raw() as third:
        assert admin.command("CLIENT", "PAUSE", "1500") == b"+OK\r\n"  # ALL is the default
        started = time.monotonic()
        c.send_command("PING")
        third.send_command("CLIENT", "UNPAUSE")  # held too, as in Redis: under ALL nothing runs
        assert nothing_arrives(c, 0.3) and nothing_arrives(third, 0.01)
        admin.send_command("CLIENT", "PAUSE", "100")  # the pausing client is held too
        with server.raw() as fresh:  # and so is one that connects during the pause
            fresh.send_command("PING")
            assert nothing_arrives(fresh, 0.3) and nothing_arrives(admin, 0.01)
            assert fresh.read_reply(timeout=5) == b"+PONG\r\n"
        assert c.read_reply() == b"+PONG\r\n"
        assert third.read_reply() == b"+OK\r\n"
        assert admin.read_reply() == b"+OK\r\n"
        assert time.monotonic() - started >= 1.3


def test_a_skip_while_one_counts_down_skips_anew(server):
    """CLIENT REPLY SKIP, SKIP, SET, GET: the second SKIP is itself skipped and arms a new skip, so only GET is
    answered (Redis's CLIENT_REPLY_SKIP_NEXT set again)."""
    with server.raw() as c:
        for request in (["CLIENT", "REPLY", "SKIP"], ["CLIENT", "REPLY", "SKIP"], ["SET", "a", "1"], ["GET", "a"]):
            c.send_command(*request)
        assert c.read_replies(1) == [b"$1\r\n1\r\n"]
        assert c.command("PING") == b"+PONG\r\n"


@pytest.mark.parametrize("mode", [[], ["ALL"], ["WRITE"]])
def test_pause_ends_at_its_timeout(server, mode):
    with server.raw() as c, server.raw() as admin:
        assert admin.command("CLIENT", "PAUSE", "300", *mode) == b"+OK\r\n"
        started = time.monotonic()
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        assert 0.2 <= time.monotonic() - started < 5
        assert admin.command("CLIENT", "PAUSE", "0") == b"+OK\r\n"  # no pause at all
        assert c.command("SET", "k", "v") == b"+OK\r\n"


def test_pause_errors(server):
    with server.raw() as c:
        assert c.command("CLIENT", "PAUSE", "x") == b"-ERR timeout is not an integer or out of range\r\n"
        assert c.command("CLIENT", "PAUSE", "-1") == b"-ERR timeout is negative\r\n"
        assert c.command("CLIENT", "PAUSE", "10", "READ") == b"-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n"
        assert c.command("CLIENT", "PAUSE") == b"-ERR wrong number of arguments for 'client|pause' command\r\n"
        assert c.command("CLIENT", "UNPAUSE") == b"+OK\r\n"  # nothing paused: still OK


def test_no_key_expires_actively_during_a_pause(server):
    with server.raw() as c, server.raw() as admin:
        for i in range(100):
            c.send_command("SET", f"t{i}", "v", "PX", "50")
        assert c.read_replies(100) == [b"+OK\r\n"] * 100
        assert admin.command("CLIENT", "PAUSE", "600", "WRITE") == b"+OK\r\n"
        time.sleep(0.4)  # long past their deadlines, yet the active expiry is paused
        stats = parse(admin.command("INFO", "stats")).decode()
        assert "\r\nexpired_keys:0\r\n" in stats
        assert admin.command("CLIENT", "UNPAUSE") == b"+OK\r\n"
        deadline = time.monotonic() + 5
        while "\r\nexpired_keys:100\r\n" not in parse(admin.command("INFO", "stats")).decode():
            assert time.monotonic() < deadline, "the keys did not expire after the pause"
            time.sleep(0.05)
