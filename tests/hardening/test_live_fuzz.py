"""Live fuzz: thousands of random and malformed requests against a running kvd, from several connections.

Bounded: FUZZ_CASES requests in all (or FUZZ_SECONDS, whichever comes first). The generator is seeded; a
failure message names the seed and the exact bytes, so a case can be replayed with ``send_case``.

After each request the connection must either be closed by kvd (a protocol error is answered with
``-ERR Protocol error: ...`` as the last reply first) or still be usable; every byte kvd sends must be valid
RESP (checked with hiredis's reader). Meanwhile a watchdog client keeps doing PING/GET (each answered within
WATCHDOG_MAX_LATENCY), and keys written before the fuzz read back byte-identical afterwards.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
import threading
import time

import hiredis
import pytest
from hardening_support import recv_until_closed

FUZZ_CASES = int(os.environ.get("KVD_FUZZ_CASES", "3000"))
FUZZ_SECONDS = float(os.environ.get("KVD_FUZZ_SECONDS", "40"))
WORKERS = 8
WATCHDOG_MAX_LATENCY = 2.0
SKIP_KINDS = set(filter(None, os.environ.get("KVD_FUZZ_SKIP_KINDS", "").split(",")))  # to look past a known bug
SEED = int(os.environ.get("KVD_FUZZ_SEED", str(random.randrange(1 << 30))))

SAFE_COMMANDS = [b"PING", b"ECHO", b"GET", b"EXISTS", b"STRLEN", b"TTL", b"TYPE", b"MGET", b"SET", b"DEL"]


def mb(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def fuzz_key(rng: random.Random) -> bytes:
    return b"fuzz:%d" % rng.randrange(50)


def valid_request(rng: random.Random) -> bytes:
    cmd = rng.choice(SAFE_COMMANDS)
    nargs = rng.randrange(0, 4)
    args = [fuzz_key(rng) if rng.random() < 0.7 else rng.randbytes(rng.randrange(0, 40)) for _ in range(nargs)]
    if cmd in (b"SET", b"DEL"):  # writes only ever touch the fuzz: namespace
        args = [fuzz_key(rng), *[rng.randbytes(rng.randrange(0, 2000))][: 1 if cmd == b"SET" else 0]]
    return mb(cmd, *args)


def malformed(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.randrange(16)
    if kind == 0:
        return "random", rng.randbytes(rng.randrange(1, 600))
    if kind == 1:
        frame = valid_request(rng)
        return "truncated", frame[: rng.randrange(1, len(frame))]
    if kind == 2:
        return "huge-bulk", b"*1\r\n$%d\r\n" % rng.choice([2**31, 2**63, 10**20, 513 * 2**20, -2, -(2**40)])
    if kind == 3:
        return "huge-multibulk", rng.choice([b"*1000000000\r\n", b"*3000000000\r\n", b"*2147483647\r\n"])
    if kind == 4:
        return "nested", b"*2\r\n*1\r\n$4\r\nPING\r\n$4\r\nPING\r\n"
    if kind == 5:
        quote = rng.choice([b'"', b"'"])
        return "unbalanced", b"ECHO " + quote + rng.randbytes(rng.randrange(0, 30)).replace(quote, b"") + b"\r\n"
    if kind == 6:
        return "http", rng.choice(
            [b"POST / HTTP/1.1\r\n", b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", b"Host: x\r\n"]
        )
    if kind == 7:
        # reply types inside a request; a prefix of valid requests makes the read long enough for every path
        bad = rng.choice(
            [
                b"*1\r\n+PING\r\n",
                b"*1\r\n:5\r\n",
                b"*1\r\n(123\r\n",
                b"*1\r\n!3\r\nabc\r\n",
                b"*1\r\n+PING\r\n" * 4 + b"*1\r\n=8\r\ntxt:PING\r\n" * 3,
            ]
        )
        return "resp-types", b"*1\r\n$4\r\nPING\r\n" * rng.randrange(0, 8) + bad
    if kind == 8:
        frame = bytearray(valid_request(rng))
        for _ in range(rng.randrange(1, 4)):  # flip some bytes
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        return "flipped", bytes(frame)
    if kind == 9:
        return "mixed-pipeline", b"".join(
            rng.choice([valid_request(rng), b"PING\r\n", b"ECHO 'x y'\r\n"]) for _ in range(rng.randrange(2, 12))
        )
    if kind == 10:
        return "long-line", rng.choice([b"a", b"*", b"*1\r\n$"]) + b"7" * rng.choice([70_000, 100_000])
    if kind == 11:
        return "bad-crlf", b"*1\r\n$4\r\nPINGxx" + b"*1\r\n$4\r\nPING\r\n"
    if kind == 12:
        return "negative-count", b"*-%d\r\nPING\r\n" % rng.randrange(1, 100)
    if kind == 13:
        return "unknown", mb(rng.randbytes(rng.randrange(1, 20)), rng.randbytes(rng.randrange(0, 300)))
    if kind == 14:
        return "arity", mb(rng.choice([b"GET", b"SET", b"ECHO", b"PING"]), *[b"fuzz:x"] * rng.randrange(3, 6))
    return "valid-pipeline", b"".join(valid_request(rng) for _ in range(rng.randrange(1, 20)))


def parse_replies(data: bytes) -> tuple[list, bool]:
    """All complete replies in ``data`` (hiredis reader) and whether a partial one is left. Raises on bad RESP."""
    reader = hiredis.Reader()
    reader.feed(data)
    replies = []
    while (r := reader.gets()) is not False:
        replies.append(r)
    return replies, reader.has_data()


MUST_ANSWER = {"valid-pipeline", "mixed-pipeline", "negative-count", "unknown", "arity"}
MUST_CLOSE = {"http", "huge-bulk", "nested", "unbalanced", "long-line", "resp-types"}
# A line over 64 KiB is refused only if its end has not arrived yet (Redis checks the same way), so these cases
# are sent alone and the marker follows after a pause. ('PINGxx' instead of CRLF after a bulk: Redis skips the
# two bytes, kvd refuses them or not depending on the parse path; either outcome is accepted here.)
SEND_ALONE = {"long-line"}


def check_case(port: int, kind: str, payload: bytes, rng: random.Random) -> str:
    """Send one case, then an ECHO of a fresh marker, on a fresh connection. Returns a problem or ''.

    Outcomes allowed: kvd closes the connection (after ``-ERR Protocol error: ...`` if it replies to the bad
    bytes at all), or it answers everything up to the marker and stays open, or (only for cases that may leave
    a frame incomplete, like truncated frames and random bytes) it waits quietly for the rest of the frame.
    """
    token = rng.randbytes(8).hex().encode()
    marker = b"$16\r\n" + token + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            if kind in SEND_ALONE:
                s.sendall(payload)
                time.sleep(0.2)
                s.sendall(mb(b"ECHO", token))
            else:
                s.sendall(payload + mb(b"ECHO", token))
        except (ConnectionResetError, BrokenPipeError):
            return "" if kind not in MUST_ANSWER else "closed while sending a valid request"
        wait = 5.0 if kind in MUST_ANSWER or kind in MUST_CLOSE else 0.25
        data, closed = recv_until_closed(s, timeout=wait, limit=1 << 30, marker=marker)
    try:
        replies, rest = parse_replies(data)
    except hiredis.ProtocolError as exc:
        return f"invalid RESP from kvd: {exc}: {data[:300]!r}"
    if rest and not closed:
        return f"a partial reply: {data[-300:]!r}"
    answered = data.endswith(marker)
    for i, r in enumerate(replies):
        if isinstance(r, hiredis.ReplyError) and str(r).startswith("ERR Protocol error:"):
            if i != len(replies) - 1:
                return f"replies after a protocol error: {replies[i:]!r}"
            if not closed:
                return f"connection left open after {r}"
    if kind in MUST_ANSWER and not answered:
        return f"a valid request was not answered in full (closed={closed}): {data[-300:]!r}"
    if kind in MUST_CLOSE and not closed:
        return f"not closed (answered={answered}): {data[-300:]!r}"
    return ""


def test_live_fuzz_many_connections(kvd_factory):
    srv = kvd_factory("--maxmemory", "64mb")
    r = srv.client()
    guard = {}
    grng = random.Random(SEED ^ 0x5EED)
    for i in range(40):
        value = grng.randbytes(grng.choice([1024, 5000, 70_000, 300_000]))
        key = b"guard:%d:%s" % (i, hashlib.sha256(value).hexdigest().encode())
        guard[key] = value
        r.set(key, value)

    stop = threading.Event()
    latencies: list[float] = []
    watchdog_errors: list[str] = []

    def watchdog() -> None:
        wr = srv.client(socket_timeout=10)
        keys = list(guard)
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            try:
                assert wr.ping()
                v = wr.get(keys[i % len(keys)])
            except Exception as exc:
                watchdog_errors.append(repr(exc))
                return
            latencies.append(time.monotonic() - t0)
            if v != guard[keys[i % len(keys)]]:
                watchdog_errors.append(f"wrong value for {keys[i % len(keys)]!r}")
            i += 1
            time.sleep(0.01)

    problems: list[str] = []
    kinds: dict[str, int] = {}
    counter = iter(range(FUZZ_CASES))
    lock = threading.Lock()
    deadline = time.monotonic() + FUZZ_SECONDS

    def worker(n: int) -> None:
        rng = random.Random(SEED * 31 + n)
        while time.monotonic() < deadline and len(problems) < 5:
            with lock:
                if next(counter, None) is None:
                    return
            kind, payload = malformed(rng)
            if kind in SKIP_KINDS:
                continue
            kinds[kind] = kinds.get(kind, 0) + 1
            problem = check_case(srv.port, kind, payload, rng)
            if problem:
                problems.append(f"seed={SEED} worker={n} kind={kind} payload={payload[:200]!r}: {problem}")
            if not srv.alive():
                problems.append(f"kvd died after {kind} payload={payload[:200]!r}")
                return

    wd = threading.Thread(target=watchdog, daemon=True)
    wd.start()
    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(FUZZ_SECONDS + 60)
    stop.set()
    wd.join(15)
    sent = sum(kinds.values())
    assert not problems, "\n".join(problems)
    assert srv.alive(), srv.log_tail()
    assert not watchdog_errors, watchdog_errors
    assert sent >= min(FUZZ_CASES, 500), f"only {sent} cases ran in {FUZZ_SECONDS} s (kinds: {kinds})"
    assert latencies and max(latencies) < WATCHDOG_MAX_LATENCY, f"watchdog max latency {max(latencies):.2f}s"
    for key, value in guard.items():
        assert r.get(key) == value, key
    assert r.ping()
    assert "Traceback" not in srv.log_tail(200_000), srv.log_tail()


def send_case(port: int, payload: bytes) -> bytes:
    """Replay helper: the raw bytes kvd answers to one payload."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(payload)
        return recv_until_closed(s, timeout=1)[0]


def test_mixed_inline_and_multibulk_pipeline_is_answered_in_full(kvd):
    """Redis answers every request of a pipeline that mixes multibulk and inline requests, in order."""
    pad = b"*1\r\n$4\r\nPING\r\n" * 6
    with kvd.connect() as s:
        s.sendall(pad + b"ECHO inline\r\n" + pad)
        data = b""
        deadline = time.monotonic() + 5
        want = b"+PONG\r\n" * 6 + b"$6\r\ninline\r\n" + b"+PONG\r\n" * 6
        while len(data) < len(want) and time.monotonic() < deadline:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            data += chunk
    assert data == want
    assert "Traceback" not in kvd.log_tail(100_000), kvd.log_tail()


@pytest.mark.parametrize("junk", [b"\x00", b"*\x00", b"$\x00"])
def test_protocol_desync_junk_ends_in_protocol_error_and_close(kvd, junk):
    """Redis's ``unit/protocol.tcl`` desync regression tests: a junk start, then junk with no line end, must
    produce ``-ERR Protocol error`` and a close (not an ever-growing buffer). Bounded: 64 x 4 KiB, 20 s."""
    with kvd.connect() as s:
        s.sendall(junk)
        payload = b"\x01" * 4096
        got = b""
        deadline = time.monotonic() + 20
        for _ in range(64):
            if time.monotonic() > deadline:
                break
            try:
                s.sendall(payload)
            except (ConnectionResetError, BrokenPipeError):
                break
        data, closed = recv_until_closed(s, timeout=5)
        got += data
    assert b"Protocol error" in got, got[:200]
    assert closed
