"""Commands refused for memory as Redis refuses them (``processCommand``): while used memory is over maxmemory and
the policy cannot free enough, every command flagged ``denyoom`` gets -OOM before it runs, whatever it would add;
after MULTI every command but EXEC, DISCARD, QUIT and RESET; and an EXEC whose queue holds a ``denyoom`` command.
A command that passed runs to the end, however much it adds (SETRANGE at a far offset). Persistence is off, so
that nothing can leave RAM but a deleted key, as in Redis; the tests marked kvd_only cover the disk tier."""

from __future__ import annotations

import os
import re
import time

import pytest
import redis
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
MiB = 1 << 20

# One call of every denyoom command kvd has, each of which would add nothing or next to nothing (the key "s" holds
# a 100-byte string, "n" the integer 1, "h" a HyperLogLog with the element "a"). RESTORE's payload is filled in.
CALLS = {
    "append": ("APPEND", "s", ""),
    "bitfield": ("BITFIELD", "s", "GET", "u8", "0"),
    "bitop": ("BITOP", "AND", "dest", "s"),
    "copy": ("COPY", "s", "copy"),
    "decr": ("DECR", "n"),
    "decrby": ("DECRBY", "n", "0"),
    "getset": ("GETSET", "n", "1"),
    "incr": ("INCR", "n"),
    "incrby": ("INCRBY", "n", "0"),
    "incrbyfloat": ("INCRBYFLOAT", "n", "0"),
    "kvd.setfrom": ("KVD.SETFROM", "kvd-none", "n", "0", "1"),
    "mset": ("MSET", "n", "1"),
    "msetnx": ("MSETNX", "n", "1"),
    "pfadd": ("PFADD", "h", "a"),
    "pfdebug": ("PFDEBUG", "ENCODING", "h"),
    "pfmerge": ("PFMERGE", "h"),
    "psetex": ("PSETEX", "n", "100000", "1"),
    "restore": ("RESTORE", "new", "0", None),
    "restore-asking": ("RESTORE-ASKING", "new", "0", None),
    "set": ("SET", "n", "1"),
    "setbit": ("SETBIT", "s", "0", "0"),
    "setex": ("SETEX", "n", "100", "1"),
    "setnx": ("SETNX", "n", "2"),
    "setrange": ("SETRANGE", "s", "0", ""),
    "sort": ("SORT", "missing"),
}


def _over(r: redis.Redis, fraction: float = 0.5) -> None:
    """maxmemory well below what the server holds now: nothing can be deleted under noeviction."""
    r.config_set("maxmemory", int(r.info("memory")["used_memory"] * fraction))


def _denyoom_commands(r: redis.Redis) -> set[str]:
    return {name for name, info in r.command().items() if "denyoom" in info["flags"]}


def test_every_denyoom_command_is_refused_while_memory_is_over_maxmemory(server_factory):
    """Redis refuses them up front, also when they would add nothing: a SETNX of an existing key, an APPEND of
    nothing, a COPY. kvd refused a write only when what it brought did not fit, so those ran."""
    srv = server_factory(maxmemory="64mb", maxmemory_policy="noeviction")
    r = srv.client()
    denyoom = _denyoom_commands(r)
    assert denyoom >= set(CALLS) - {"kvd.setfrom"}  # Redis's flags (COMMAND INFO), on both servers
    if srv.kind == "kvd":
        assert denyoom == set(CALLS)  # every one kvd has is called below
    r.set("big", os.urandom(2 * MiB))
    r.set("s", b"s" * 100)
    r.set("n", 1)
    r.pfadd("h", "a")
    payload = r.dump("s")
    r.config_set("maxmemory", r.info("memory")["used_memory"] - MiB)  # over by a MiB
    with srv.raw() as c:
        for name in sorted(denyoom & set(CALLS)):
            call = [payload if arg is None else arg for arg in CALLS[name]]
            assert c.command(*call) == OOM, name
        assert c.command("GET", "n") == b"$1\r\n1\r\n"  # reads and the writes that cannot grow memory run
        assert c.command("EXPIRE", "n", "1000") == b":1\r\n"
        assert c.command("PERSIST", "n") == b":1\r\n"
        assert c.command("GETDEL", "missing") == b"$-1\r\n"
    assert r.get("s") == b"s" * 100
    assert r.exists("copy", "dest", "new") == 0
    stats = r.info("commandstats")
    assert (stats["cmdstat_setnx"]["calls"], stats["cmdstat_setnx"]["rejected_calls"]) == (0, 1)
    assert r.delete("big") == 1  # a delete brings memory back under maxmemory: writes run again
    assert r.setnx("n", 2) is False
    assert r.append("s", "") == 100
    assert r.copy("s", "copy") is True


def test_a_transaction_that_does_not_fit_is_refused_whole(server_factory):
    """The commands queued after MULTI are in memory until EXEC: a second 2.5 MB SET does not fit in 4 MB of room
    beside the first. kvd queued both and refused only the second when EXEC ran it: half a transaction."""
    r = server_factory(maxmemory="64mb", maxmemory_policy="noeviction").client()
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 4_000_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError), r.pipeline() as pipe:  # MULTI ... EXEC
        pipe.set("a", b"a" * 2_500_000).set("b", b"b" * 2_500_000).execute()
    assert r.exists("a", "b") == 0
    with r.pipeline() as pipe:
        assert pipe.set("a", b"a" * 1_000_000).set("b", b"b" * 1_000_000).execute() == [True, True]


def test_exec_is_refused_when_memory_went_over_after_queueing(server_factory):
    """Redis checks EXEC itself when its queue holds a denyoom command: -EXECABORT, nothing of it applied. Once
    memory is over, every command queued after MULTI is refused (not EXEC, DISCARD), and a transaction of reads
    still runs. kvd ran the queue and refused the write inside it."""
    srv = server_factory(maxmemory="64mb", maxmemory_policy="allkeys-lru")
    r = srv.client()
    r.config_set("maxmemory-policy", "noeviction")  # at run time
    r.set("filler", os.urandom(MiB))
    with srv.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("SET", "k", "v") == b"+QUEUED\r\n"
        assert c.command("INCR", "n") == b"+QUEUED\r\n"
        _over(r)
        assert c.command("EXEC") == (
            b"-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n"
        )
        assert r.exists("k", "n") == 0
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("GET", "k") == OOM  # queued commands take memory, whatever they are
        assert c.command("SAVE") == b"-ERR Command not allowed inside a transaction\r\n"  # checked before memory
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("DISCARD") == b"+OK\r\n"
        r.config_set("maxmemory", 0)
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("GET", "filler") == b"+QUEUED\r\n"
        assert c.command("TTL", "filler") == b"+QUEUED\r\n"
        _over(r)
        reply = parse(c.command("EXEC"))  # no denyoom command in it: it runs
        assert len(reply) == 2 and len(reply[0]) == MiB and reply[1] == -1


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_a_transaction_queue_is_bounded_under_every_policy(server_factory, policy):
    """Under the allkeys-* policies too, the commands queued after MULTI are in memory until EXEC: eviction makes
    room for them, and once it cannot (the queue alone is over maxmemory) the next one is refused and EXEC aborts.
    kvd checked the queue only under the policies that may refuse writes: under allkeys-lru with an 8 MB
    maxmemory it queued 100 SETs of 1 MB (RSS up by 100 MB), where Redis refused the fourth."""
    srv = server_factory(maxmemory="8mb", maxmemory_policy=policy)
    r = srv.client()
    r.set("small", "x")
    value = b"v" * MiB
    with srv.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        replies = [c.command("SET", f"k{i}", value) for i in range(16)]
        assert replies[0] == b"+QUEUED\r\n"
        first = replies.index(OOM)  # ValueError: every one was queued
        assert replies[first:] == [OOM] * (16 - first)
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    assert r.exists(*(f"k{i}" for i in range(16))) == 0
    if srv.kind == "kvd":  # a queue that cannot fit even with every key gone deletes none (Redis evicts them all)
        assert r.get("small") == b"x"
    with r.pipeline() as pipe:  # a transaction that fits runs
        assert pipe.set("a", value).set("b", value).execute() == [True, True]
    assert r.get("a") == value


@pytest.mark.kvd_only  # the disk tier
@pytest.mark.parametrize("policy", ["noeviction", "allkeys-lru"])
def test_with_persistence_a_queued_value_counts_whole_until_exec(server_factory, policy):
    """A value larger than half of maxmemory needs no room when it is set (it lives on disk only), but queued after
    MULTI it is in RAM until EXEC: the queue counts it, so a transaction cannot hold more than maxmemory. kvd
    charged such values nothing, and queued 60 SETs of 5 MB (300 MB of RSS) under an 8 MB maxmemory."""
    srv = server_factory(persistence="yes", maxmemory="8mb", maxmemory_policy=policy)
    r = srv.client()
    value = b"v" * 5_000_000
    with srv.raw() as c:
        assert c.command("MULTI") == b"+OK\r\n"
        assert c.command("SET", "a", value) == b"+QUEUED\r\n"
        assert c.command("SET", "b", value) == OOM
        assert c.command("EXEC") == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
        assert r.exists("a", "b") == 0
        assert c.command("MULTI") == b"+OK\r\n"  # one of them fits, and then lives on disk only
        assert c.command("SET", "a", value) == b"+QUEUED\r\n"
        assert parse(c.command("EXEC")) == ["OK"]
    assert r.set("b", value) is True  # not queued: its request needs no room
    assert r.info("memory")["used_memory"] < MiB
    assert r.mget("a", "b") == [value, value]


@pytest.mark.parametrize(
    "grow",
    [
        ("SETRANGE", "k", "4000000", "x"),
        ("SETBIT", "k", str(8 * 4_000_000), "1"),
        ("BITFIELD", "k", "SET", "u8", str(8 * 4_000_000), "1"),
    ],
    ids=["setrange", "setbit", "bitfield"],
)
def test_a_write_at_a_far_offset_runs_when_memory_is_under_maxmemory(server_factory, grow):
    """A request of a few bytes that builds a 4 MB string with 1 MB of room: Redis runs it (it checks memory
    before the command, not what the command will add) and is over maxmemory afterwards, so the next denyoom
    command is refused until memory is freed. kvd charged the growth and refused it."""
    r = server_factory(maxmemory="64mb", maxmemory_policy="noeviction").client()
    r.set("n", 1)
    r.config_set("maxmemory", r.info("memory")["used_memory"] + MiB)
    r.execute_command(*grow)
    assert r.strlen("k") == 4_000_001
    memory = r.info("memory")
    assert memory["used_memory"] > memory["maxmemory"]  # charged, and over
    assert 4_000_001 <= r.memory_usage("k") < 4_400_000
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.incr("n")
    assert r.delete("k") == 1
    assert r.incr("n") == 2


def test_past_proto_max_bulk_len_the_errors_are_redis_s(server_factory):
    """The only limit on a far offset besides memory: proto-max-bulk-len, with Redis's errors."""
    r = server_factory(maxmemory="64mb", maxmemory_policy="noeviction", proto_max_bulk_len="1mb").client()
    for call, error in (
        (("SETRANGE", "k", str(MiB), "x"), "string exceeds maximum allowed size (proto-max-bulk-len)"),
        (("SETBIT", "k", str(8 * MiB), "1"), "bit offset is not an integer or out of range"),
        (("BITFIELD", "k", "SET", "u8", str(8 * MiB), "1"), "bit offset is not an integer or out of range"),
    ):
        with pytest.raises(redis.exceptions.ResponseError, match=re.escape(error)):
            r.execute_command(*call)
    assert r.exists("k") == 0
    assert r.setrange("k", MiB - 1, "x") == MiB
    assert r.append("k", "") == MiB
    with pytest.raises(redis.exceptions.ResponseError, match="string exceeds maximum allowed size"):
        r.append("k", "y")


@pytest.mark.kvd_only  # the disk tier
def test_with_persistence_values_leave_ram_instead_of_writes_being_refused(server_factory):
    """Under noeviction with the log on, a maxmemory below what RAM holds demotes values to disk rather than
    refusing commands; only when the keys alone (their metadata stays in RAM) are over it are commands refused."""
    srv = server_factory(persistence="yes", maxmemory="64mb", maxmemory_policy="noeviction")
    r = srv.client()
    values = {f"v{i}": os.urandom(256 * 1024) for i in range(20)}
    r.mset(values)
    r.config_set("maxmemory", MiB)
    assert r.info("memory")["used_memory"] <= MiB
    assert r.setnx("v0", b"x") is False
    assert r.set("v20", os.urandom(256 * 1024)) is True
    assert r.setrange("far", 8_000_000, "x") == 8_000_001  # larger than half the RAM tier: kept on disk only
    assert r.info("memory")["used_memory"] <= MiB
    assert r.memory_usage("far") < 1000  # its key only
    assert r.getrange("far", 8_000_000, -1) == b"x"
    assert r.mget(list(values)) == list(values.values())
    r.config_set("maxmemory", "64mb")
    with r.pipeline(transaction=False) as pipe:
        for i in range(0, 4000, 500):
            pipe.mset({f"k{j}": b"1" for j in range(i, i + 500)})
        pipe.execute()
    r.config_set("maxmemory", MiB)  # 4000 keys: their entries alone, which stay in RAM, are over it
    assert r.info("memory")["used_memory"] > MiB
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.setnx("k0", b"2")
    assert r.delete(*(f"k{j}" for j in range(3000))) == 3000
    assert r.setnx("k0", b"2") is True


@pytest.mark.kvd_only  # Redis's words are its own (and it warns before evicting)
def test_a_maxmemory_below_what_stays_in_ram_is_logged(server_factory):
    """Redis logs a warning when CONFIG SET maxmemory is below its memory usage; kvd logs one when eviction
    could not bring the RAM tier under it, which is when commands start to be refused."""
    srv = server_factory(maxmemory="64mb", maxmemory_policy="noeviction")
    r = srv.client()
    r.set("big", os.urandom(2 * MiB))
    r.config_set("maxmemory", "4mb")
    r.config_set("maxmemory", MiB)
    assert r.info("memory")["used_memory"] > MiB
    deadline = time.monotonic() + 5
    while "is smaller than what the RAM tier holds" not in srv.stderr_text():
        assert time.monotonic() < deadline, srv.stderr_text()[-2000:]
        time.sleep(0.05)
    assert srv.stderr_text().count("is smaller than what the RAM tier holds") == 1  # not for 4mb: it fits
