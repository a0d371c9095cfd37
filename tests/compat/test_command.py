"""COMMAND LIST, COUNT and INFO: the command table as Redis 7 lists it, subcommands by their full names
(``client|list``), so that tools that walk it (ACL editors, proxies, redis-cli's hints) see what they see on Redis."""

from __future__ import annotations

import pytest
from support.raw import parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(120)]

# What kvd lists that Debian's redis-server 7.0 does not: kvd's own commands, and what Redis 7.2 added.
KVD_EXTRAS = {b"kvd.prefixlen", b"kvd.report", b"waitaof", b"client|no-touch", b"client|setinfo"}


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
            missing = {n for n in theirs - mine if n.startswith(container + b"|")}
            assert missing <= {b"command|getkeysandflags"}, container  # key specs: kvd has none


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
