"""CLIENT KILL as Redis 7.0 has it: the old form (one address: OK or "No such client", and it may name the caller)
and the filters (ID, TYPE, USER, ADDR, LADDR, SKIPME; all must match; the caller skipped unless SKIPME no; the
count killed), with Redis's errors. Runs against redis-server too (KVD_TEST_TARGET=redis)."""

from __future__ import annotations

import pytest
import redis
from support.raw import encode, parse

pytestmark = [pytest.mark.compat, pytest.mark.timeout(60)]


def info(r: redis.Redis) -> dict[str, str]:
    return dict(f.split("=", 1) for f in r.execute_command("CLIENT", "INFO").decode().split())


def connected(srv, name: str) -> tuple[redis.Redis, dict[str, str]]:
    r = srv.client()
    r.client_setname(name)
    return r, info(r)


def names(srv) -> set[str]:
    with srv.client() as r:
        return {c["name"] for c in r.client_list()} - {""}


def kill(r: redis.Redis, *args) -> object:
    return r.execute_command("CLIENT", "KILL", *args)


def test_filters_must_all_match_and_skip_the_caller(server):
    admin, me = connected(server, "admin")
    _a, ia = connected(server, "a")  # held: the connection lives as long as the object
    _b, ib = connected(server, "b")
    assert kill(admin, "ID", ia["id"], "ADDR", ib["addr"]) == 0  # two filters naming two clients: none matches
    assert names(server) >= {"admin", "a", "b"}
    assert kill(admin, "ID", me["id"]) == 0  # the caller is skipped by default
    assert kill(admin, "ADDR", ia["addr"], "LADDR", ia["laddr"], "USER", "default", "TYPE", "normal") == 1
    assert "a" not in names(server)
    assert kill(admin, "id", ib["id"], "skipme", "YES") == 1
    assert names(server) == {"admin"}


def test_type_normal_spares_the_caller_unless_skipme_no(server):
    others = [connected(server, f"o{i}")[0] for i in range(3)]
    with server.raw() as admin:
        assert admin.command("CLIENT", "SETNAME", "admin") == b"+OK\r\n"
        assert admin.command("CLIENT", "KILL", "TYPE", "normal") == b":3\r\n"
        assert admin.command("CLIENT", "LIST").count(b" name=") == 1  # asked here: another connection would count
        assert admin.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no") == b":1\r\n"  # itself, after this
        assert admin.is_closed(timeout=10)
    assert names(server) == set()
    del others


def test_laddr_selects_by_the_local_address(server):
    admin, me = connected(server, "admin")
    assert kill(admin, "LADDR", "10.9.8.7:1") == 0
    _other, _ = connected(server, "other")
    assert kill(admin, "LADDR", me["laddr"]) == 1  # the two share it; the caller is skipped
    assert names(server) == {"admin"}


def test_old_form_names_one_address_and_may_name_the_caller(server):
    admin, _ = connected(server, "admin")
    _a, ia = connected(server, "a")  # held: the connection lives as long as the object
    assert kill(admin, ia["addr"]) == b"OK"
    assert "a" not in names(server)
    with pytest.raises(redis.ResponseError, match="^No such client$"):
        kill(admin, "1.2.3.4:5")
    with server.raw() as victim:
        addr = victim.command("CLIENT", "INFO").split(b"addr=")[1].split()[0]
        assert victim.command("CLIENT", "KILL", addr) == b"+OK\r\n"  # its own reply first, then the close
        assert victim.is_closed(timeout=10)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("ID", "0"), "client-id should be greater than 0"),
        (("ID", "x"), "client-id should be greater than 0"),
        (("TYPE", "bogus"), "Unknown client type 'bogus'"),
        (("USER", "nobody"), "No such user 'nobody'"),
        (("SKIPME", "maybe"), "syntax error"),
        (("ADDR",), "No such client"),  # three arguments are the old form: an address named ADDR
        (("ID", "1", "LADDR"), "syntax error"),
        (("COLOR", "red"), "syntax error"),
    ],
)
def test_errors(server, args, error):
    with pytest.raises(redis.ResponseError) as exc:
        kill(server.client(), *args)
    assert str(exc.value) == error


def test_client_list_id_lists_in_the_order_asked_and_checks_each_id(server):
    with server.raw() as a, server.raw() as b:
        ids = [parse(a.command("CLIENT", "ID")), parse(b.command("CLIENT", "ID"))]
        listing = parse(a.command("CLIENT", "LIST", "ID", ids[1], ids[0], ids[1], 999_999)).decode()
        assert [line.split()[0] for line in listing.splitlines()] == [f"id={i}" for i in (ids[1], ids[0], ids[1])]
        assert a.command("CLIENT", "LIST", "ID", "x") == b"-ERR Invalid client ID\r\n"


def test_a_killed_client_is_gone_at_once(server):
    """Killing one client twice in one pipeline: 1, then 0, and CLIENT LIST no longer shows it."""
    with server.raw() as a, server.raw() as victim:
        vid = parse(victim.command("CLIENT", "ID"))
        a.send(b"".join(encode(*r) for r in (["CLIENT", "KILL", "ID", vid], ["CLIENT", "KILL", "ID", vid])))
        assert a.read_replies(2) == [b":1\r\n", b":0\r\n"]
        a.send(encode("CLIENT", "KILL", "ID", vid) + encode("CLIENT", "LIST", "ID", vid))
        assert a.read_replies(2) == [b":0\r\n", b"$0\r\n\r\n"]


def test_a_killed_subscriber_gets_no_more_messages_in_the_killers_pipeline(server):
    with server.raw() as admin, server.raw() as sub:
        sid = parse(sub.command("CLIENT", "ID"))
        assert sub.command("SUBSCRIBE", "ch").endswith(b":1\r\n")
        admin.send(b"".join(encode(*r) for r in (["CLIENT", "KILL", "ID", sid], ["PUBLISH", "ch", "m"])))
        assert admin.read_replies(2) == [b":1\r\n", b":0\r\n"]
        assert admin.command("PUBSUB", "NUMSUB", "ch") == b"*2\r\n$2\r\nch\r\n:0\r\n"
