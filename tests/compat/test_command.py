"""COMMAND LIST, COUNT, INFO and DOCS: the command table as Redis 7 lists it, subcommands by their full names
(``client|list``), so that tools that walk it (ACL editors, proxies, redis-cli's hints) see what they see on Redis."""

from __future__ import annotations

from typing import Any

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

# What kvd lists that Debian's redis-server 7.0 does not: kvd's own commands, and what Redis 7.2 added.
KVD_EXTRAS = {
    b"kvd.prefixlen",
    b"kvd.report",
    b"kvd.getinto",
    b"kvd.setfrom",
    b"waitaof",
    b"client|no-touch",
    b"client|setinfo",
}


def test_list_names_subcommands_and_filters_each_on_its_own(server):
    with server.raw() as c:
        names = parse(c.command("COMMAND", "LIST"))
        assert len(names) == len(set(names))
        assert {b"get", b"client", b"client|list", b"config|get", b"command|list"} <= set(names)
        tops = [n for n in names if b"|" not in n]
        assert parse(c.command("COMMAND", "COUNT")) == len(tops)  # COUNT counts commands, not subcommands
        infos = parse(c.command("COMMAND", "INFO", *names))
        assert [info[0] for info in infos] == names  # each full name is one COMMAND INFO knows
        docs = parse(c.command("COMMAND", "DOCS", "client|list", "get"))
        assert docs[0::2] == [b"client|list", b"get"]
        config = sorted(parse(c.command("COMMAND", "LIST", "FILTERBY", "PATTERN", "config|*")))
        assert config == [b"config|get", b"config|help", b"config|resetstat", b"config|rewrite", b"config|set"]
        connection = set(parse(c.command("COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection")))
        assert {b"client|id", b"hello", b"ping"} <= connection
        assert b"client" not in connection  # the container is @slow only; its subcommands have their own
        assert c.command("COMMAND", "LIST", "FILTERBY", "MODULE", "search") == b"*0\r\n"


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
def test_list_is_redis_s_for_what_kvd_has(server, redis_server):
    with server.raw() as kvd, redis_server.raw() as redis:
        mine = set(parse(kvd.command("COMMAND", "LIST")))
        theirs = set(parse(redis.command("COMMAND", "LIST")))
        assert mine - theirs == KVD_EXTRAS
        for container in {n.split(b"|")[0] for n in mine if b"|" in n}:
            assert not {n for n in theirs - mine if n.startswith(container + b"|")}, container


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
@pytest.mark.parametrize("protocol", [2, 3])
def test_info_is_redis_s_byte_for_byte(server, redis_server, protocol):
    """Every command and subcommand both servers have: COMMAND INFO's whole entry, flags in Redis's order, ACL
    categories, tips and key specs, the same bytes in RESP2 and RESP3. A container's subcommands come in Redis's
    hash-table order (its tip says the order varies), so they are compared one by one; kvd's CLIENT has 7.2's
    NO-TOUCH and SETINFO besides."""
    with server.raw() as kvd, redis_server.raw() as redis:
        for c in (kvd, redis):
            assert c.command("HELLO", protocol).startswith(b"%" if protocol == 3 else b"*")
        names = set(parse(kvd.command("COMMAND", "LIST"))) - KVD_EXTRAS
        compared = 0
        for name in sorted(names):
            mine, theirs = kvd.command("COMMAND", "INFO", name), redis.command("COMMAND", "INFO", name)
            if mine == theirs:
                compared += 1
                continue
            mine_entry, theirs_entry = parse(mine)[0], parse(theirs)[0]
            assert mine_entry[:9] == theirs_entry[:9], name
            mine_subs = {sub[0]: sub for sub in mine_entry[9]}
            assert mine_subs, name  # only a container's entry may differ in its bytes
            for sub in theirs_entry[9]:
                assert mine_subs.pop(sub[0]) == sub, sub[0]
            assert set(mine_subs) <= KVD_EXTRAS, name
        assert compared > 190
        # kvd's own: the connector's prefix look-up names keys as EXISTS does
        found = parse(kvd.command("COMMAND", "GETKEYSANDFLAGS", "kvd.prefixlen", "a", "b"))
        assert [(key, list(flags)) for key, flags in found] == [(b"a", ["RO"]), (b"b", ["RO"])]


def _reply_tree(data: bytes) -> Any:
    """One reply as nested ``(type byte, value)`` pairs, in the order it was written: what ``parse`` makes of it
    plus the RESP type of each part (bulk or simple, set or array), with a map's keys and values in one list."""

    def read(pos: int) -> tuple[Any, int]:
        nl = data.index(b"\r\n", pos)
        kind, head, pos = data[pos : pos + 1], data[pos + 1 : nl], nl + 2
        if kind in (b"$", b"=", b"!"):
            n = int(head)
            return (kind, None if n < 0 else data[pos : pos + n]), pos + max(n, 0) + 2 * (n >= 0)
        if kind in (b"*", b"~", b">", b"%"):
            items = []
            for _ in range(int(head) * (2 if kind == b"%" else 1)):
                item, pos = read(pos)
                items.append(item)
            return (kind, items), pos
        return (kind, head), pos

    tree, end = read(0)
    assert end == len(data)
    return tree


def _docs_entry(entry: Any) -> list[tuple[Any, Any]]:
    """A command's COMMAND DOCS entry without its summary and history (kvd words its own summaries and has no
    history), its subcommands by name in any order (Redis's come in hash-table order) but kvd's extras."""
    kind, items = entry
    found = []
    for key, value in zip(items[0::2], items[1::2], strict=True):
        if key[1] in (b"summary", b"history"):
            continue
        if key[1] == b"subcommands":
            subs = value[1]
            value = sorted(
                (name, _docs_entry(sub)) for name, sub in zip(subs[0::2], subs[1::2], strict=True)
                if name[1] not in KVD_EXTRAS
            )  # fmt: skip
        found.append((key, value))
    return [(kind, b""), *found]


@pytest.mark.kvd_only  # compares kvd's table with redis-server's
@pytest.mark.parametrize("protocol", [2, 3])
def test_docs_are_redis_s_but_the_summary(server, redis_server, protocol):
    """Every command and subcommand both servers have: COMMAND DOCS' since, group, complexity, doc flags,
    deprecation and the whole argument tree (names, types, tokens, key spec indexes, since, flags and their
    order, RESP types) are Redis's, in RESP2 and RESP3. The summary is kvd's wording; kvd gives no history."""
    with server.raw() as kvd, redis_server.raw() as redis:
        for c in (kvd, redis):
            assert c.command("HELLO", protocol).startswith(b"%" if protocol == 3 else b"*")
        names = sorted(set(parse(kvd.command("COMMAND", "LIST"))) - KVD_EXTRAS)
        differ = []
        for name in names:
            mine, theirs = (_reply_tree(c.command("COMMAND", "DOCS", name)) for c in (kvd, redis))
            assert mine[1][0] == theirs[1][0] == (b"$", name), name
            if _docs_entry(mine[1][1]) != _docs_entry(theirs[1][1]):
                differ.append(name)
        assert differ == []
        assert len(names) > 200


@pytest.mark.kvd_only  # kvd's own commands
def test_docs_of_kvd_s_own_commands_come_from_their_usage(server):
    """A command Redis 7.0 lacks has a tree read from its usage line: alternatives at the top are one argument
    (no argument named "|"), groups are named after their parts, ``key [key ...]`` is one repeated key."""
    with server.raw() as c:
        assert c.command("HELLO", 3).startswith(b"%")
        docs = parse(c.command("COMMAND", "DOCS", *sorted(KVD_EXTRAS - {b"client|no-touch", b"client|setinfo"})))
        docs.update(parse(c.command("COMMAND", "DOCS", "client"))[b"client"][b"subcommands"])

        def names(arguments: list[dict[bytes, Any]]) -> list[bytes]:
            return [n for a in arguments for n in (a[b"name"], *names(a.get(b"arguments", [])))]

        assert set(docs) >= KVD_EXTRAS
        for name in KVD_EXTRAS:
            assert b"|" not in names(docs[name][b"arguments"]), name
        no_touch = docs[b"client|no-touch"][b"arguments"]
        assert no_touch == [
            {
                b"name": b"on_off",
                b"type": b"oneof",
                b"arguments": [
                    {b"name": b"on", b"type": b"pure-token", b"token": b"ON"},
                    {b"name": b"off", b"type": b"pure-token", b"token": b"OFF"},
                ],
            }
        ]
        assert docs[b"kvd.prefixlen"][b"arguments"] == [{b"name": b"key", b"type": b"key", b"flags": {"multiple"}}]


# Requests whose keys both servers must find alike: positions, several key specs, keys found by the arguments
# (SORT ... STORE, SET ... GET, BITFIELD), subcommands, channels that are not keys, and each refusal.
GETKEYS_REQUESTS = (
    ["get", "k"], ["set", "k", "v"], ["set", "k", "v", "GET"], ["set", "k", "v", "nx", "get", "ex", "5"],
    ["mset", "a", "1", "b", "2"], ["mget", "a", "b", "c"], ["del", "a", "b"], ["exists", "a"],
    ["bitop", "and", "dest", "s1", "s2"], ["bitfield", "k", "get", "u8", "0"],
    ["bitfield", "k", "overflow", "sat", "get", "u8", "0"], ["bitfield", "k", "incrby", "u8", "0", "1"],
    ["bitfield", "k", "get", "u8"], ["bitfield_ro", "k", "get", "u8", "0"], ["copy", "s", "d", "replace"],
    ["rename", "a", "b"], ["renamenx", "a", "b"], ["lcs", "a", "b"], ["getex", "k", "persist"],
    ["sort", "k"], ["sort", "k", "by", "w_*", "limit", "0", "5", "get", "#", "store", "d"],
    ["sort", "k", "store", "d1", "store", "d2"], ["sort", "k", "store"], ["sort", "k", "get", "store", "d"],
    ["sort_ro", "k", "by", "x"], ["object", "encoding", "k"], ["memory", "usage", "k"], ["watch", "a", "b"],
    ["touch", "a"], ["spublish", "ch", "m"], ["ssubscribe", "ch"], ["publish", "ch", "m"], ["ping"],
    ["client", "list"], ["object", "nosuch", "k"], ["nosuch", "k"], ["get"], ["get", "a", "b"], ["object"],
    ["mset", "a", "1", "b"], ["expire", "k", "10"], ["msetnx", "a", "1"], ["append", "k", "v"],
)  # fmt: skip


@pytest.mark.kvd_only  # compares kvd with redis-server
@pytest.mark.parametrize("subcommand", ["GETKEYS", "GETKEYSANDFLAGS"])
def test_getkeys_finds_redis_s_keys_and_flags(server, redis_server, subcommand):
    with server.raw() as kvd, redis_server.raw() as redis:
        for request in GETKEYS_REQUESTS:
            mine = kvd.command("COMMAND", subcommand, *request)
            assert mine == redis.command("COMMAND", subcommand, *request), request
        # The same bytes, read back: a request with a STORE has two keys, the second one overwritten
        keys = parse(kvd.command("COMMAND", "GETKEYSANDFLAGS", "sort", "k", "store", "d"))
        assert keys == [[b"k", ["RO", "access"]], [b"d", ["OW", "update"]]]


def test_getkeys_reads_the_arguments_where_position_cannot_tell(server):
    """The cases Redis finds with a function rather than by position, on either server."""
    with server.raw() as c:

        def flags(*request: str) -> list[list[str]]:
            return [entry[1] for entry in parse(c.command("COMMAND", "GETKEYSANDFLAGS", *request))]

        assert flags("set", "k", "v") == [["OW", "update"]]
        assert flags("set", "k", "v", "get") == [["RW", "access", "update"]]
        assert flags("bitfield", "k", "get", "u8", "0") == [["RO", "access"]]
        assert flags("bitfield", "k", "set", "u8", "0", "1") == [["RW", "access", "update"]]
        assert parse(c.command("COMMAND", "GETKEYS", "sort", "k", "store", "a", "store", "b")) == [b"k", b"b"]
        assert parse(c.command("COMMAND", "GETKEYS", "bitop", "or", "d", "x", "y")) == [b"d", b"x", b"y"]
        assert c.command("COMMAND", "GETKEYS", "spublish", "ch", "m") == b"-ERR The command has no key arguments\r\n"
        assert c.command("COMMAND", "GETKEYS", "mset", "a") == (
            b"-ERR Invalid number of arguments specified for command\r\n"
        )


def test_cluster_commands_say_cluster_support_is_disabled(server):
    """As Redis without cluster-enabled: every CLUSTER subcommand (HELP too), READONLY, READWRITE and ASKING, after
    the arity and subcommand checks."""
    disabled = b"-ERR This instance has cluster support disabled\r\n"
    with server.raw() as c:
        requests = (["CLUSTER", "SLOTS"], ["CLUSTER", "INFO"], ["CLUSTER", "NODES"], ["CLUSTER", "SHARDS"],
                    ["CLUSTER", "KEYSLOT", "k"], ["CLUSTER", "HELP"], ["READONLY"], ["READWRITE"],
                    ["ASKING"])  # fmt: skip
        for request in requests:
            assert c.command(*request) == disabled, request
        assert c.command("CLUSTER", "NOSUCH") == b"-ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.\r\n"
        assert c.command("CLUSTER", "KEYSLOT") == b"-ERR wrong number of arguments for 'cluster|keyslot' command\r\n"
        assert c.command("CLUSTER") == b"-ERR wrong number of arguments for 'cluster' command\r\n"
        assert c.command("PING") == b"+PONG\r\n"


def test_info_of_an_unknown_command_is_a_null(server):
    with server.raw() as c:
        assert c.command("COMMAND", "INFO", "nosuch") == b"*1\r\n$-1\r\n"
        assert c.command("HELLO", "3").startswith(b"%")
        assert c.command("COMMAND", "INFO", "nosuch") == b"*1\r\n_\r\n"
