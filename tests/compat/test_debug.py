"""DEBUG and MODULE as Redis 7 answers them: refused by default (before AUTH and before MULTI queues them),
Redis's digests byte for byte, OBJECT's line, POPULATE, the RESP sample replies, SLEEP's stall, a crash that
loses nothing acknowledged, and an empty MODULE LIST. Every test runs against redis-server too
(KVD_TEST_TARGET=redis, which passes ``--enable-debug-command``), apart from those marked kvd_only: the
constants below are redis-server 7.0's own answers."""

from __future__ import annotations

import re
import signal
import socket
import threading
import time

import pytest
from support.raw import ConnectionClosed, parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

REFUSED = (
    b'-ERR DEBUG command not allowed. If the enable-debug-command option is set to "local", you can run it from a '
    b"local connection, otherwise you need to set this option in the configuration file, and then restart the "
    b"server.\r\n"
)
MODULE_REFUSED = REFUSED.replace(b"DEBUG", b"MODULE").replace(b"enable-debug-command", b"enable-module-command")

# A small dataset and redis-server 7.0.15's DEBUG DIGEST and DIGEST-VALUE of it.
DATASET = [("a", "1"), ("b", "hello"), ("c", "x" * 100)]
DIGEST = b"+085d05c2c292e87c2843933195588e684bb4788e\r\n"  # the three above and e = 5 with a TTL
VALUE_DIGESTS = [
    "b4fc66738120fba0b5aa500ab5c2bf89cea1c5da",  # a
    "36b23a1456b2dce2c3ed252c456761301dba8060",  # b
    "6942b9b71aaff9a398b7a2f898756f5e28dd3cd1",  # c
    "1e47b7737b7537b3113b09ca0319a5fd0e2bf48d",  # e: its value and that it has a deadline, not the deadline
    "0" * 40,  # no such key (simple strings: parse() gives str)
]
OBJECT_LINE = re.compile(
    rb"\+Value at:0x[0-9a-f]+ refcount:\d+ encoding:(int|embstr|raw) serializedlength:(\d+) lru:\d+ "
    rb"lru_seconds_idle:\d+\r\n"
)


def load(c, ttl_ms: int = 100_000) -> None:
    for key, value in DATASET:
        assert c.command("SET", key, value) == b"+OK\r\n"
    assert c.command("SET", "e", "5", "PX", ttl_ms) == b"+OK\r\n"


def until(check, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_debug_is_refused_by_default_before_auth_and_before_multi_queues_it(server_factory):
    srv = server_factory(requirepass="pw")
    with srv.raw() as c:
        assert c.command("DEBUG", "SLEEP", "0") == REFUSED  # not NOAUTH: the guard comes first
        assert c.command("AUTH", "pw") == b"+OK\r\n"
        assert c.command("DEBUG", "DIGEST") == REFUSED
        assert (
            c.command("CONFIG", "GET", "enable-debug-command") == b"*2\r\n$20\r\nenable-debug-command\r\n$2\r\nno\r\n"
        )
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("DEBUG", "SLEEP", "0") == REFUSED
        assert c.command("SET", "k", "v") == b"+QUEUED\r\n"
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.command("EXISTS", "k") == b":0\r\n"
        assert c.command("CONFIG", "SET", "enable-debug-command", "yes").startswith(
            b"-ERR CONFIG SET failed (possibly related to argument 'enable-debug-command')"
        )


def test_local_is_127_0_0_1_and_not_the_rest_of_loopback(server_factory):
    """Redis's islocalClient: a client from 127.0.0.1 may, one from 127.0.0.2 (loopback too) may not. (A password,
    so that Redis's protected mode, which has the same rule, lets the second one in.)"""
    srv = server_factory(enable_debug_command="local", requirepass="pw")
    with srv.raw() as c:
        assert c.command("AUTH", "pw") == b"+OK\r\n"
        assert c.command("DEBUG", "SLEEP", "0") == b"+OK\r\n"
    with socket.create_connection((srv.host, srv.port), timeout=10, source_address=("127.0.0.2", 0)) as sock:
        sock.sendall(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n0\r\n")
        got = b""
        while got.count(b"\r\n") < 2:
            got += sock.recv(4096)
        assert got == b"+OK\r\n" + REFUSED


def test_the_guard_comes_before_the_pubsub_context(server):
    with server.raw() as c:
        assert c.command("SUBSCRIBE", "ch").startswith(b"*3\r\n$9\r\nsubscribe\r\n")
        assert c.command("DEBUG", "SLEEP", "0") == REFUSED
        assert c.command("MODULE", "UNLOAD", "x") == MODULE_REFUSED
        assert c.command("MODULE", "LIST").startswith(b"-ERR Can't execute 'module|list'")


def test_digests_are_redis_s(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        assert c.command("DEBUG", "DIGEST") == b"+" + b"0" * 40 + b"\r\n"  # no keys
        load(c)
        assert c.command("DEBUG", "DIGEST") == DIGEST
        got = parse(c.command("DEBUG", "DIGEST-VALUE", "a", "b", "c", "e", "nosuchkey"))
        assert got == VALUE_DIGESTS
        assert parse(c.command("DEBUG", "DIGEST-VALUE")) == []
        assert c.command("SET", "c", "y") == b"+OK\r\n"
        assert c.command("DEBUG", "DIGEST") != DIGEST  # a changed value changes it
        assert c.command("SET", "c", "x" * 100) == b"+OK\r\n"
        assert c.command("DEBUG", "DIGEST") == DIGEST  # and only the data does: not when or in what order
        assert c.command("FLUSHALL") == b"+OK\r\n"
        assert c.command("SET", "big", bytes(range(256)) * 4096) == b"+OK\r\n"  # 1 MiB: hashed in a thread
        assert c.command("DEBUG", "DIGEST") == b"+a6e12c7d1d9a5f5c4fac3df0137b6ecc244ed448\r\n"
        assert parse(c.command("DEBUG", "DIGEST-VALUE", "big")) == ["ea6690585458f55105744f47bbb7c5b9b5f922ad"]


def test_digest_inside_exec_keeps_the_transaction_whole(server_factory):
    """Another client's write sent while EXEC signs 100 000 keys runs after the transaction, not inside it."""
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as a, srv.raw() as b:
        assert a.command("DEBUG", "POPULATE", "100000") == b"+OK\r\n"
        for request in (["MULTI"], ["SET", "x", "1"], ["DEBUG", "DIGEST"], ["GET", "x"]):
            a.command(*request)
        a.send_command("EXEC")
        time.sleep(0.05)  # the digest takes far longer than this on both servers
        b.send_command("SET", "x", "2")
        replies = parse(a.read_reply(timeout=60))
        assert replies[0] == "OK" and len(replies[1]) == 40 and replies[2] == b"1"
        assert b.read_reply() == b"+OK\r\n"
        assert a.command("MULTI") == b"+OK\r\n"
        assert a.command("DEBUG", "POPULATE", "3", "tx") == b"+QUEUED\r\n"
        assert a.command("EXEC") == b"*1\r\n+OK\r\n"
        assert parse(a.command("GET", "tx:2")) == b"value:2"


def test_digest_value_sees_a_key_past_its_deadline_until_it_is_reclaimed(server_factory):
    """With the sweep off (SET-ACTIVE-EXPIRE 0) an expired key stays stored: DBSIZE counts it and DIGEST-VALUE
    signs it, until a read drops it; with the sweep back on, the next one goes by itself."""
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        assert c.command("DEBUG", "SET-ACTIVE-EXPIRE", "0") == b"+OK\r\n"
        assert c.command("SET", "e", "5", "PX", "50") == b"+OK\r\n"
        time.sleep(0.5)  # five sweeps' worth
        assert c.command("DBSIZE") == b":1\r\n"
        assert parse(c.command("DEBUG", "DIGEST-VALUE", "e")) == [VALUE_DIGESTS[3]]
        assert c.command("GET", "e") == b"$-1\r\n"
        assert parse(c.command("DEBUG", "DIGEST-VALUE", "e")) == ["0" * 40]
        assert c.command("DEBUG", "SET-ACTIVE-EXPIRE", "1") == b"+OK\r\n"
        assert c.command("SET", "f", "5", "PX", "50") == b"+OK\r\n"
        until(lambda: c.command("DBSIZE") == b":0\r\n", "the sweep to remove f")


@pytest.mark.kvd_only
def test_digest_is_the_same_from_ram_from_disk_and_after_a_restart(server_factory):
    """The digest reads a snapshot: values demoted to the disk tier, and a dataset recovered from the log, sign
    as the same values held in RAM."""
    srv = server_factory(enable_debug_command="yes", persistence=True, maxmemory="2mb")
    big = b"z" * (256 << 10)
    with srv.raw() as c:
        load(c)
        assert c.command("SET", "big0", big) == b"+OK\r\n"
        before = c.command("DEBUG", "DIGEST")
        for i in range(1, 16):  # 4 MiB of values through a 2 MiB RAM tier: the first ones go to disk
            assert c.command("SET", f"big{i}", big) == b"+OK\r\n"
        for i in range(1, 16):
            assert c.command("DEL", f"big{i}") == b":1\r\n"
        stats = parse(c.command("MEMORY", "STATS"))
        assert stats[stats.index(b"kvd.cold-keys") + 1] > 0  # some of the first keys are on disk only
        assert c.command("DEBUG", "DIGEST") == before
    srv.restart()
    with srv.raw() as c:
        assert c.command("DEBUG", "DIGEST") == before  # every value now cold, read from its segment
        assert parse(c.command("DEBUG", "DIGEST-VALUE", "a", "b", "c", "e")) == VALUE_DIGESTS[:4]


def test_object_line(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        load(c)
        for key, encoding in (("a", b"int"), ("b", b"embstr"), ("c", b"raw")):
            line = c.command("DEBUG", "OBJECT", key)
            match = OBJECT_LINE.fullmatch(line)
            assert match and match.group(1) == encoding, line
        assert c.command("DEBUG", "OBJECT", "nosuchkey") == b"-ERR no such key\r\n"


@pytest.mark.kvd_only
def test_object_serializedlength_is_the_length_kvd_s_rdb_files_give_the_value(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        load(c)
        assert OBJECT_LINE.fullmatch(c.command("DEBUG", "OBJECT", "c")).group(2) == b"102"  # 1-byte length + 100


def test_populate(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        assert c.command("SET", "key:1", "mine") == b"+OK\r\n"
        assert c.command("DEBUG", "POPULATE", "3") == b"+OK\r\n"
        assert [parse(c.command("GET", f"key:{i}")) for i in range(3)] == [b"value:0", b"mine", b"value:2"]
        assert c.command("DEBUG", "POPULATE", "2", "p", "10") == b"+OK\r\n"
        assert parse(c.command("GET", "p:1")) == b"value:1\0\0\0"  # padded with zero bytes to the size
        assert c.command("DEBUG", "POPULATE", "1", "q", "3") == b"+OK\r\n"
        assert parse(c.command("GET", "q:0")) == b"val"  # or cut to it
        assert c.command("DBSIZE") == b":6\r\n"
        assert c.command("DEBUG", "POPULATE", "-1") == b"-ERR value is out of range, must be positive\r\n"
        assert c.command("DEBUG", "POPULATE", "x") == b"-ERR value is out of range, must be positive\r\n"
        assert c.command("DEBUG", "POPULATE", "1", "p", "1", "extra").startswith(
            b"-ERR unknown subcommand or wrong number of arguments for 'POPULATE'. Try DEBUG HELP."
        )


@pytest.mark.kvd_only
def test_populate_under_noeviction_is_all_or_nothing(server_factory):
    srv = server_factory(enable_debug_command="yes", maxmemory="2mb", maxmemory_policy="noeviction")
    with srv.raw() as c:
        assert (
            c.command("DEBUG", "POPULATE", "100000") == b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
        )
        assert c.command("DBSIZE") == b":0\r\n"
        assert c.command("DEBUG", "POPULATE", "100") == b"+OK\r\n"
        assert c.command("DBSIZE") == b":100\r\n"


@pytest.mark.kvd_only
def test_populated_keys_are_in_the_log(server_factory):
    """Unlike Redis's (which neither logs nor replicates them), kvd's POPULATE writes SETs: a restart keeps them."""
    srv = server_factory(enable_debug_command="yes", persistence=True)
    with srv.raw() as c:
        assert c.command("DEBUG", "POPULATE", "1000", "pop", "64") == b"+OK\r\n"
    srv.kill9()
    srv.restart()
    with srv.raw() as c:
        assert c.command("DBSIZE") == b":1000\r\n"
        assert parse(c.command("GET", "pop:999")) == b"value:999".ljust(64, b"\0")


RESP2 = {
    "string": b"$11\r\nHello World\r\n",
    "integer": b":12345\r\n",
    "double": b"$5\r\n3.141\r\n",
    "bignum": b"$37\r\n1234567999999999999999999999999999999\r\n",
    "null": b"$-1\r\n",
    "array": b"*3\r\n:0\r\n:1\r\n:2\r\n",
    "set": b"*3\r\n:0\r\n:1\r\n:2\r\n",
    "map": b"*6\r\n:0\r\n:0\r\n:1\r\n:1\r\n:2\r\n:0\r\n",
    "attrib": b"$39\r\nSome real reply following the attribute\r\n",
    "push": b"-ERR RESP2 is not supported by this command\r\n",
    "verbatim": b"$25\r\nThis is a verbatim\nstring\r\n",
    "true": b":1\r\n",
    "false": b":0\r\n",
}
RESP3 = {
    **RESP2,
    "double": b",3.141\r\n",
    "bignum": b"(1234567999999999999999999999999999999\r\n",
    "null": b"_\r\n",
    "set": b"~3\r\n:0\r\n:1\r\n:2\r\n",
    "map": b"%3\r\n:0\r\n#f\r\n:1\r\n#t\r\n:2\r\n#f\r\n",
    "attrib": b"|1\r\n$14\r\nkey-popularity\r\n*2\r\n$7\r\nkey:123\r\n:90\r\n" + RESP2["attrib"],
    "push": b">2\r\n$16\r\nserver-cpu-usage\r\n:42\r\n$40\r\nSome real reply following the push reply\r\n",
    "verbatim": b"=29\r\ntxt:This is a verbatim\nstring\r\n",
    "true": b"#t\r\n",
    "false": b"#f\r\n",
}


def test_protocol_samples_in_resp2_and_resp3(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        for name, reply in RESP2.items():
            c.send_command("DEBUG", "PROTOCOL", name)
            assert c.recv_exact(len(reply)) == reply, name
        assert c.command("HELLO", "3").startswith(b"%")
        for name, reply in RESP3.items():
            c.send_command("DEBUG", "PROTOCOL", name)
            assert c.recv_exact(len(reply)) == reply, name
        assert c.command("DEBUG", "PROTOCOL", "nope") == (
            b"-ERR Wrong protocol type name. Please use one of the following: "
            b"string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false\r\n"
        )


def test_error_log_and_unknown_subcommands(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:
        assert c.command("CONFIG", "RESETSTAT") == b"+OK\r\n"
        assert c.command("DEBUG", "ERROR", "MYCODE something\r\nelse") == b"-MYCODE something  else\r\n"
        stats = parse(c.command("INFO", "errorstats")) + parse(c.command("INFO", "commandstats"))
        assert b"MYCODE" not in stats and b"failed_calls=0" in stats  # a sample reply, not a failure
        assert c.command("DEBUG", "LOG", "a line from the test") == b"+OK\r\n"
        assert c.command("DEBUG", "NOSUCH") == (
            b"-ERR unknown subcommand or wrong number of arguments for 'NOSUCH'. Try DEBUG HELP.\r\n"
        )
        assert c.command("DEBUG", "OBJECT").startswith(b"-ERR unknown subcommand or wrong number of arguments")
        assert c.command("DEBUG") == b"-ERR wrong number of arguments for 'debug' command\r\n"
        help_lines = parse(c.command("DEBUG", "HELP"))
        assert help_lines[0] == "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        for name in ("DIGEST", "OBJECT <key>", "SLEEP <seconds>", "HELP"):
            assert name in help_lines
    until(lambda: "DEBUG LOG: a line from the test" in srv.stderr_text(), "the line in the server's log")


def test_sleep_stops_the_whole_server(server_factory):
    srv = server_factory(enable_debug_command="yes")
    answered: list[float] = []
    with srv.raw() as sleeper, srv.raw() as other:
        started = time.monotonic()
        sleeper.send_command("DEBUG", "SLEEP", "0.5")
        time.sleep(0.1)  # the server is asleep now

        def ping() -> None:
            assert other.command("PING") == b"+PONG\r\n"
            answered.append(time.monotonic() - started)

        pinger = threading.Thread(target=ping)
        pinger.start()
        assert sleeper.read_reply() == b"+OK\r\n"
        assert time.monotonic() - started >= 0.5
        pinger.join(10)
        assert answered and answered[0] >= 0.45  # the other client waited for it too
        assert sleeper.command("DEBUG", "SLEEP", "not a number") == b"+OK\r\n"  # strtod: 0 s


def test_change_repl_id(server_factory):
    srv = server_factory(enable_debug_command="yes")
    with srv.raw() as c:

        def replid() -> str:
            text = parse(c.command("INFO", "replication")).decode()
            return re.search(r"master_replid:([0-9a-f]{40})", text).group(1)

        before = replid()
        assert c.command("DEBUG", "CHANGE-REPL-ID") == b"+OK\r\n"
        after = replid()
        assert after != before
        assert "master_replid2:" + "0" * 40 in parse(c.command("INFO", "replication")).decode()


@pytest.mark.parametrize("how, code", [("SEGFAULT", -signal.SIGSEGV), ("PANIC", None), ("ASSERT", None)])
def test_a_crash_keeps_what_was_acknowledged(server_factory, how, code):
    """DEBUG SEGFAULT and PANIC kill the server where it stands, without a shutdown; the restarted server serves
    every write it acknowledged."""
    srv = server_factory(enable_debug_command="yes", persistence=True)
    with srv.raw() as c:
        for i in range(100):
            c.send_command("SET", f"k{i}", f"v{i}")
        assert c.read_replies(100) == [b"+OK\r\n"] * 100
        c.send_command("DEBUG", how)
        assert c.is_closed(timeout=10)
    status = srv.proc.wait(10)
    srv.killed = True
    assert status < 0 if code is None else status == code
    srv.restart()
    with srv.raw() as c:
        assert c.command("DBSIZE") == b":100\r\n"
        assert parse(c.command("GET", "k99")) == b"v99"


def answers(srv) -> bool:
    try:
        with srv.raw(timeout=2) as c:
            return c.command("PING") == b"+PONG\r\n"
    except (OSError, ConnectionClosed):  # refused, or reset by a restart (Redis closes its listener last)
        return False


@pytest.mark.parametrize("how", ["RESTART", "CRASH-AND-RECOVER"])
def test_restart_executes_the_same_server_again(server_factory, how):
    """The same process (same PID) runs the same command line again and serves what it held; the client that
    asked gets no reply, its connection closes."""
    srv = server_factory(enable_debug_command="yes", persistence=True)
    pid = srv.pid
    with srv.raw() as c:
        for i in range(50):
            c.send_command("SET", f"k{i}", f"v{i}")
        assert c.read_replies(50) == [b"+OK\r\n"] * 50
        c.send_command("DEBUG", how, "300")
        assert c.is_closed(timeout=30)
    until(lambda: answers(srv), "the server to answer again", timeout=60)
    assert srv.running and srv.pid == pid
    with srv.raw() as c:
        assert c.command("DBSIZE") == b":50\r\n"
        assert parse(c.command("GET", "k49")) == b"v49"
        assert c.command("DEBUG", "RESTART", "x") == b"-ERR value is not an integer or out of range\r\n"


@pytest.mark.kvd_only
def test_restart_rewrites_the_settings_file_first(server_factory, tmp_path):
    """As Redis's: what CONFIG SET changed is written into the file before the process reads it again."""
    config = tmp_path / "kvd.toml"
    config.write_text('maxmemory = "64mb"\n')
    srv = server_factory(config=config, enable_debug_command="yes")
    with srv.raw() as c:
        assert c.command("CONFIG", "SET", "maxmemory", "100mb") == b"+OK\r\n"
        c.send_command("DEBUG", "RESTART")
        assert c.is_closed(timeout=30)
    until(lambda: answers(srv), "the server to answer again", timeout=60)
    assert 'maxmemory = "100mb"' in config.read_text()
    with srv.raw() as c:
        assert parse(c.command("CONFIG", "GET", "maxmemory")) == [b"maxmemory", b"104857600"]


@pytest.mark.kvd_only
def test_a_crash_report_goes_to_the_logfile(server_factory, tmp_path):
    """With ``logfile`` set, the stack of every thread (faulthandler) lands in the log, after the line that
    says why, as Redis writes its crash report into its log."""
    logfile = tmp_path / "kvd.log"
    srv = server_factory(enable_debug_command="yes", logfile=str(logfile))
    with srv.raw() as c:
        c.send_command("DEBUG", "SEGFAULT")
        assert c.is_closed(timeout=10)
    assert srv.proc.wait(10) == -signal.SIGSEGV
    srv.killed = True
    text = logfile.read_text()
    assert "DEBUG SEGFAULT: crashing with SIGSEGV" in text
    assert "Fatal Python error: Segmentation fault" in text
    assert 'kvd/commands/debug.py", line' in text  # the stack names where it died


def test_module_list_is_empty_and_loading_is_refused(server):
    with server.raw() as c:
        assert c.command("MODULE", "LIST") == b"*0\r\n"
        assert c.command("MODULE", "LOAD", "/tmp/nothing.so") == MODULE_REFUSED
        assert c.command("MODULE", "UNLOAD", "x") == MODULE_REFUSED
        assert c.command("MODULE", "NOSUCH") == b"-ERR unknown subcommand 'NOSUCH'. Try MODULE HELP.\r\n"
        assert c.command("CONFIG", "GET", "enable-module-command") == (
            b"*2\r\n$21\r\nenable-module-command\r\n$2\r\nno\r\n"
        )
    r = server.client()
    assert r.module_list() == []


def test_redis_py_reads_debug_object(server_factory):
    srv = server_factory(enable_debug_command="yes")
    r = srv.client(protocol=2)
    r.set("c", "x" * 100)
    info = r.debug_object("c")
    assert info["encoding"] == "raw" and info["refcount"] == 1 and "lru_seconds_idle" in info
