"""One redis-py client run, in its own interpreter (PYTHONPATH picks the redis-py version and hides hiredis).

    python redis_py_client.py '{"port": 6379, "major": 8, "hiredis": true, "mode": "sync", "protocol": 3,
                                "prefix": "m:8:...", "auth_port": 6380, "password": "pw"}'

``protocol`` null means the library's default (RESP2 before 8.0, RESP3 from 8.0). Asserts everything itself
and prints one JSON line with what it found (version, parser class, negotiated protocol); exit 0 = all good.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import redis
import redis.utils

cfg = json.loads(sys.argv[1])
HOST = "127.0.0.1"
BIG = os.urandom(4 << 20)


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def kwargs(**extra):
    kw = {"host": HOST, "socket_timeout": 20, "socket_connect_timeout": 10}
    if cfg["protocol"] is not None:
        kw["protocol"] = cfg["protocol"]
    kw.update(extra)
    return kw


def expected_protocol() -> int:
    if cfg["protocol"] is not None:
        return cfg["protocol"]
    return 3 if cfg["major"] >= 8 else 2


def expected_parser(asyncio_mode: bool) -> str:
    if cfg["hiredis"]:
        return "_AsyncHiredisParser" if asyncio_mode else "_HiredisParser"
    name = "_RESP3Parser" if expected_protocol() == 3 else "_RESP2Parser"
    return name.replace("_RESP", "_AsyncRESP") if asyncio_mode else name


def common_checks() -> None:
    check(redis.__version__.startswith(f"{cfg['major']}."), f"redis-py {redis.__version__} is not {cfg['major']}.x")
    check(cfg["hiredis"] == redis.utils.HIREDIS_AVAILABLE, f"HIREDIS_AVAILABLE={redis.utils.HIREDIS_AVAILABLE}")


def data(prefix: str) -> dict[bytes, bytes]:
    return {f"{prefix}:{i}".encode(): f"value-{i}".encode() for i in range(25)}


def run_sync() -> dict:
    p = cfg["prefix"]
    r = redis.Redis(port=cfg["port"], **kwargs())
    check(r.ping() is True, "ping")
    conn = r.connection_pool.make_connection()
    conn.connect()
    parser = type(conn._parser).__name__
    conn.disconnect()
    check(parser == expected_parser(False), f"parser {parser}, expected {expected_parser(False)}")
    # the protocol the server actually speaks on this connection: HELLO with no argument reports it
    hello = r.execute_command("HELLO")
    hello = dict(zip(hello[::2], hello[1::2], strict=True)) if isinstance(hello, list) else hello
    proto = hello.get(b"proto", hello.get("proto"))
    check(proto == expected_protocol(), f"server says proto {proto}, expected {expected_protocol()}")

    check(r.set(f"{p}:k", b"v") is True, "set")
    check(r.get(f"{p}:k") == b"v", "get")
    check(r.get(f"{p}:missing") is None, "get miss")
    check(r.set(f"{p}:k", b"w", nx=True) is None, "set nx on existing key")
    check(r.set(f"{p}:k", b"w", xx=True, ex=100) is True, "set xx ex")
    check(0 < r.ttl(f"{p}:k") <= 100, "ttl")
    d = data(p)
    check(r.mset(d) is True, "mset")
    keys = list(d)
    check(r.mget([*keys, f"{p}:missing"]) == [*d.values(), None], "mget")
    check(set(r.scan_iter(match=f"{p}:*", count=7)) == {*keys, f"{p}:k".encode()}, "scan_iter")
    check(r.exists(*keys) == len(keys), "exists")

    pipe = r.pipeline(transaction=False)
    for i in range(100):
        pipe.set(f"{p}:pipe:{i}", i)
        pipe.get(f"{p}:pipe:{i}")
    res = pipe.execute()
    check(res == [x for i in range(100) for x in (True, str(i).encode())], "pipeline")

    check(r.set(f"{p}:big", BIG) is True, "set 4 MiB")
    check(r.get(f"{p}:big") == BIG, "get 4 MiB")
    check(r.strlen(f"{p}:big") == len(BIG), "strlen")
    check(r.delete(f"{p}:big", f"{p}:missing") == 1, "delete")

    rd = redis.Redis(port=cfg["port"], decode_responses=True, **kwargs())
    check(rd.get(f"{p}:0") == "value-0", "decode_responses")
    rd.close()
    r.close()

    # a password-protected server
    ra = redis.Redis(port=cfg["auth_port"], password=cfg["password"], **kwargs())
    check(ra.ping() is True, "ping with password")
    check(ra.set(f"{p}:auth", b"1") is True and ra.get(f"{p}:auth") == b"1", "set/get with password")
    ra.close()
    # no retries: redis-py 8 retries AuthenticationError (a ConnectionError) with backoff for ~4 s
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    for bad in ({}, {"password": "wrong"}):
        rb = redis.Redis(port=cfg["auth_port"], retry=Retry(NoBackoff(), 0), **kwargs(**bad))
        try:
            rb.get(f"{p}:auth")
        except redis.AuthenticationError:
            pass
        else:
            raise AssertionError(f"no AuthenticationError with {bad}")
        finally:
            rb.close()
    return {"parser": parser, "proto": proto}


async def run_async() -> dict:
    import redis.asyncio as aredis

    async def close(c) -> None:
        await (c.aclose() if hasattr(c, "aclose") else c.close())

    p = cfg["prefix"]
    r = aredis.Redis(port=cfg["port"], **kwargs())
    check(await r.ping() is True, "ping")
    conn = r.connection_pool.make_connection()
    await conn.connect()
    parser = type(conn._parser).__name__
    await conn.disconnect()
    check(parser == expected_parser(True), f"parser {parser}, expected {expected_parser(True)}")
    hello = await r.execute_command("HELLO")
    hello = dict(zip(hello[::2], hello[1::2], strict=True)) if isinstance(hello, list) else hello
    proto = hello.get(b"proto", hello.get("proto"))
    check(proto == expected_protocol(), f"server says proto {proto}, expected {expected_protocol()}")

    check(await r.set(f"{p}:k", b"v") is True, "set")
    check(await r.get(f"{p}:k") == b"v", "get")
    check(await r.get(f"{p}:missing") is None, "get miss")
    d = data(p)
    check(await r.mset(d) is True, "mset")
    keys = list(d)
    check(await r.mget([*keys, f"{p}:missing"]) == [*d.values(), None], "mget")
    found = {k async for k in r.scan_iter(match=f"{p}:*", count=7)}
    check(found == {*keys, f"{p}:k".encode()}, "scan_iter")

    async with r.pipeline(transaction=False) as pipe:
        for i in range(100):
            pipe.set(f"{p}:pipe:{i}", i)
            pipe.get(f"{p}:pipe:{i}")
        res = await pipe.execute()
    check(res == [x for i in range(100) for x in (True, str(i).encode())], "pipeline")

    # many coroutines on one pool at once: replies must match their requests
    vals = await asyncio.gather(*(r.echo(f"echo-{i}") for i in range(50)))
    check(vals == [f"echo-{i}".encode() for i in range(50)], "concurrent echo")

    check(await r.set(f"{p}:big", BIG) is True, "set 4 MiB")
    check(await r.get(f"{p}:big") == BIG, "get 4 MiB")
    await close(r)

    ra = aredis.Redis(port=cfg["auth_port"], password=cfg["password"], **kwargs())
    check(await ra.ping() is True, "ping with password")
    check(await ra.set(f"{p}:auth", b"1") is True and await ra.get(f"{p}:auth") == b"1", "set/get with password")
    await close(ra)
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff

    for bad in ({}, {"password": "wrong"}):
        rb = aredis.Redis(port=cfg["auth_port"], retry=AsyncRetry(NoBackoff(), 0), **kwargs(**bad))
        try:
            await rb.get(f"{p}:auth")
        except redis.AuthenticationError:
            pass
        else:
            raise AssertionError(f"no AuthenticationError with {bad}")
        finally:
            await close(rb)
    return {"parser": parser, "proto": proto}


def main() -> None:
    common_checks()
    found = run_sync() if cfg["mode"] == "sync" else asyncio.run(run_async())
    print(json.dumps({"version": redis.__version__, "hiredis": redis.utils.HIREDIS_AVAILABLE, **found}))


if __name__ == "__main__":
    main()
