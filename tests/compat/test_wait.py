"""WAIT, WAITAOF, ROLE and CLIENT UNBLOCK on a server without replicas (KVD_TEST_TARGET=redis runs the WAIT and
UNBLOCK checks against redis-server too; it has no WAITAOF before 7.2)."""

from __future__ import annotations

import time

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def persistence(c) -> dict[str, str]:
    text = parse(c.command("INFO", "persistence")).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_role_is_a_primary_without_replicas(server):
    with server.raw() as c:
        assert parse(c.command("ROLE")) == [b"master", 0, []]


def test_wait_counts_no_replicas_and_blocks_only_its_client(server):
    with server.raw() as c, server.raw() as other:
        assert c.command("SET", "k", "v") == b"+OK\r\n"
        assert c.command("WAIT", "0", "0") == b":0\r\n"  # nothing asked for: at once
        started = time.monotonic()
        c.send_command("WAIT", "1", "300")  # a replica that never comes: the whole timeout
        assert other.command("GET", "k") == b"$1\r\nv\r\n"  # others are served meanwhile
        assert c.read_reply() == b":0\r\n"
        assert 0.25 <= time.monotonic() - started < 5
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("WAIT", "1", "0") == b"+QUEUED\r\n"
        assert c.command("EXEC") == b"*1\r\n:0\r\n"  # never blocks inside a transaction
        assert c.command("WAIT", "0", "-1") == b"-ERR timeout is negative\r\n"
        assert c.command("WAIT", "0", "x") == b"-ERR timeout is not an integer or out of range\r\n"


def clients_info(c) -> dict[str, str]:
    text = parse(c.command("INFO", "clients")).decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def flags_of(admin, client_id: int) -> str:
    line = parse(admin.command("CLIENT", "LIST", "ID", str(client_id))).decode()
    return dict(field.split("=", 1) for field in line.split())["flags"]


def until(check, what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_blocked_clients_are_counted_as_redis_counts_them(server):
    """INFO clients ``blocked_clients`` and ``clients_in_timeout_table``, and CLIENT LIST's flag ``b``: a WAIT
    with a timeout, one without, and a write CLIENT PAUSE holds (kvd showed 0, 0 and no flag)."""
    with server.raw() as timed, server.raw() as untimed, server.raw() as writer, server.raw() as admin:
        ids = [parse(c.command("CLIENT", "ID")) for c in (timed, untimed, writer)]
        assert (clients_info(admin)["blocked_clients"], clients_info(admin)["clients_in_timeout_table"]) == ("0", "0")
        timed.send_command("WAIT", "1", "30000")
        untimed.send_command("WAIT", "1", "0")
        until(lambda: clients_info(admin)["blocked_clients"] == "2", "two WAITs blocked")
        assert clients_info(admin)["clients_in_timeout_table"] == "1"
        assert [("b" in flags_of(admin, i)) for i in ids] == [True, True, False]
        assert admin.command("CLIENT", "PAUSE", "30000", "WRITE") == b"+OK\r\n"
        writer.send_command("SET", "k", "v")
        until(lambda: clients_info(admin)["blocked_clients"] == "3", "the held SET counted")
        assert clients_info(admin)["clients_in_timeout_table"] == "1"
        assert "b" in flags_of(admin, ids[2])
        assert admin.command("CLIENT", "UNPAUSE") == b"+OK\r\n"
        assert writer.read_reply() == b"+OK\r\n"
        for i in ids[:2]:
            assert admin.command("CLIENT", "UNBLOCK", str(i)) == b":1\r\n"
        assert timed.read_reply() == untimed.read_reply() == b":0\r\n"
        info = clients_info(admin)
        assert (info["blocked_clients"], info["clients_in_timeout_table"]) == ("0", "0")
        assert [("b" in flags_of(admin, i)) for i in ids] == [False, False, False]


@pytest.mark.parametrize(
    ("how", "reply"),
    [([], b":0\r\n"), (["TIMEOUT"], b":0\r\n"), (["ERROR"], b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n")],
)
def test_client_unblock_ends_a_wait_for_ever(server, how, reply):
    with server.raw() as c, server.raw() as admin:
        blocked_id = parse(c.command("CLIENT", "ID"))
        c.send_command("WAIT", "1", "0")  # no timeout: only CLIENT UNBLOCK ends it
        deadline = time.monotonic() + 5
        while True:  # the WAIT may not have arrived yet: retry until it is blocked
            answer = admin.command("CLIENT", "UNBLOCK", str(blocked_id), *how)
            if answer == b":1\r\n" or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert answer == b":1\r\n"
        assert c.read_reply() == reply
        assert c.command("PING") == b"+PONG\r\n"  # the connection goes on
        assert admin.command("CLIENT", "UNBLOCK", str(blocked_id)) == b":0\r\n"  # no longer blocked


@pytest.mark.kvd_only
def test_a_blocked_client_does_not_hold_up_shutdown_or_leak_on_disconnect(server_factory):
    srv = server_factory()
    with srv.raw() as c:
        c.send_command("WAIT", "1", "0")
        time.sleep(0.1)
    with srv.raw() as c:  # the first client went away while blocked: the server is fine
        assert c.command("PING") == b"+PONG\r\n"
        waiting = srv.raw()
        waiting.send_command("WAIT", "1", "0")
        time.sleep(0.1)
        started = time.monotonic()
        srv.stop()  # SHUTDOWN ends the wait at once instead of waiting out its grace period
        assert time.monotonic() - started < 5
        waiting.close()


@pytest.mark.kvd_only  # WAITAOF came with Redis 7.2; the Debian redis-server is 7.0
def test_waitaof_answers_once_the_writes_are_fsynced(server_factory):
    srv = server_factory(persistence="yes", appendfsync="no")  # nothing is fsynced unless asked
    with srv.raw() as c:
        assert c.command("SET", "k", "v" * 1000) == b"+OK\r\n"
        assert persistence(c)["rdb_changes_since_last_save"] == "1"
        assert parse(c.command("WAITAOF", "1", "0", "0")) == [1, 0]  # blocks until fsynced
        assert persistence(c)["rdb_changes_since_last_save"] == "0"  # it asked the log for an fsync
        assert parse(c.command("WAITAOF", "1", "0", "0")) == [1, 0]  # nothing new: at once, no fsync
        assert parse(c.command("WAITAOF", "0", "0", "0")) == [1, 0]
        started = time.monotonic()
        assert parse(c.command("WAITAOF", "1", "1", "200")) == [1, 0]  # the replica never acknowledges
        assert time.monotonic() - started >= 0.15
        for args, error in (
            (["2", "0", "0"], b"-ERR value is out of range, value must between 0 and 1\r\n"),
            (["1", "-1", "0"], b"-ERR value is out of range, must be positive\r\n"),
            (["1", "0", "-5"], b"-ERR timeout is negative\r\n"),
            (["x", "0", "0"], b"-ERR value is not an integer or out of range\r\n"),
        ):
            assert c.command("WAITAOF", *args) == error


@pytest.mark.kvd_only
def test_waitaof_needs_the_log_for_a_local_fsync(server_factory):
    srv = server_factory(persistence="no")
    with srv.raw() as c:
        assert c.command("WAITAOF", "1", "0", "0") == (
            b"-ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.\r\n"
        )
        assert parse(c.command("WAITAOF", "0", "0", "0")) == [0, 0]
