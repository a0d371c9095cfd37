"""Property tests of ``RequestParser``, driven the way the event loop drives a ``BufferedProtocol``.

The loop asks ``get_buffer()`` for memory, ``recv_into``s at most ``len(buffer)`` bytes and reports the count
to ``feed()`` while it still holds the buffer (uvloop releases it only after ``buffer_updated``). ``drive`` does
exactly that with chunk sizes chosen by the test (or by Hypothesis).
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvd.protocol import parser as parser_module
from kvd.protocol.errors import DropConnection, ProtocolError
from kvd.protocol.parser import BIG_ARG, INLINE_MAX, INT_MAX, RequestParser

try:
    from kvd.protocol._receive import Receiver
except ImportError:  # no compiler at install time: test_buffers.py fails the set-up for it
    Receiver = None

# The two ways reads reach the parser: straight (kvd's Python receive path), and through the C receiver
# (kvd/protocol/receive.py), which takes the middle of large values and whole landing requests itself.
RECEIVE_PATHS = ["python", pytest.param("c", marks=pytest.mark.skipif(Receiver is None, reason="_receive not built"))]


@pytest.fixture(autouse=True, params=["c", "python"])
def small_requests(request, monkeypatch) -> str:
    """Every test runs with whole small requests parsed by kvd/protocol/_multibulk.c, and without it (hiredis
    and the patterns), as where it was not built: the paths must agree on every input and every split."""
    if request.param == "c" and parser_module.parse_requests is None:
        pytest.skip("kvd.protocol._multibulk was not built")
    if request.param == "python":
        monkeypatch.setattr(parser_module, "parse_requests", None)
    return request.param


MAX_BULK = 1 << 20
QUERY_LIMIT = 4 << 20
SETTINGS = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


def new_parser(*, authenticated: bool = True, max_bulk: int = MAX_BULK, query_limit: int = QUERY_LIMIT):
    return RequestParser(max_bulk=max_bulk, query_limit=query_limit, authenticated=authenticated)


def drive(
    parser: RequestParser, data: bytes, sizes: list[int] | None = None, receive: str = "python"
) -> list[list[bytes]]:
    """Feed ``data`` in pieces (``sizes`` cycled; None = as much as each buffer takes). Returns the commands.
    ``receive="c"`` puts a C ``Receiver`` between the loop and the parser, wired as kvd/connection.py wires it.

    Exceptions propagate; the commands completed before one are in ``parser_commands`` of the exception.
    """
    out: list = []
    if receive == "c":
        receiver = parser.receiver = Receiver(
            parser.get_buffer, lambda n, reads=1, land=None: parser.feed(n, out, land), 1, 1 << 30
        )
        get_buffer, buffer_updated = receiver.get_buffer, receiver.buffer_updated
    else:
        get_buffer, buffer_updated = parser.get_buffer, lambda n: parser.feed(n, out)
    pos, i = 0, 0
    try:
        while pos < len(data):
            buf = get_buffer(-1)
            assert len(buf) > 0, "get_buffer() returned an empty buffer"
            n = len(buf) if not sizes else sizes[i % len(sizes)]
            i += 1
            n = max(1, min(n, len(buf), len(data) - pos))
            buf[:n] = data[pos : pos + n]
            held = memoryview(buf)  # the event loop's export, held until buffer_updated returns
            buffer_updated(n)
            held.release()
            buf.release()
            pos += n
    except (ProtocolError, DropConnection) as exc:
        exc.parser_commands = [[bytes(a) for a in cmd] for cmd in out]  # type: ignore[attr-defined]
        raise
    return [[bytes(a) for a in cmd] for cmd in out]


def multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


# -- strategies ----------------------------------------------------------------------------------------------

small_arg = st.binary(min_size=0, max_size=40)
# Large args (> BIG_ARG, received in place) are built from a short seed so Hypothesis stays fast.
large_arg = st.builds(
    lambda seed, n: (seed * (n // len(seed) + 1))[:n],
    st.binary(min_size=1, max_size=8),
    st.integers(min_value=BIG_ARG - 2, max_value=3 * BIG_ARG),
)
mb_arg = st.one_of(small_arg, small_arg, small_arg, large_arg)

_PLAIN = st.binary(min_size=1, max_size=12).filter(
    lambda b: not any(c in b for c in b" \t\n\r\v\f\"'\\") and b and b[0] != ord("*")
)
_ANY = st.binary(min_size=0, max_size=24)


def dq_encode(arg: bytes, hexes: list[bool]) -> bytes:
    """Double-quote an arbitrary byte string with sdssplitargs escapes (\\xHH, \\n, \\", \\\\)."""
    out = bytearray(b'"')
    named = {10: b"\\n", 13: b"\\r", 9: b"\\t", 8: b"\\b", 7: b"\\a", 34: b'\\"', 92: b"\\\\"}
    for i, c in enumerate(arg):
        if hexes[i % len(hexes)] or c < 32 or c > 126:
            out += b"\\x%02x" % c if hexes[i % len(hexes)] or c not in named else named[c]
        elif c in named:
            out += named[c]
        else:
            out.append(c)
    return bytes(out + b'"')


@st.composite
def inline_command(draw) -> tuple[bytes, list[bytes]]:
    """An inline line and the args it must split into (plain, double-quoted and single-quoted tokens)."""
    n = draw(st.integers(1, 5))
    tokens, args = [], []
    for _ in range(n):
        kind = draw(st.sampled_from(["plain", "dq", "sq"]))
        if kind == "plain":
            arg = draw(_PLAIN)
            tok = arg
        elif kind == "dq":
            arg = draw(_ANY)
            tok = dq_encode(arg, draw(st.lists(st.booleans(), min_size=1, max_size=4)))
        else:
            arg = draw(_ANY.filter(lambda b: not any(c in b for c in b"'\\\r\n")))
            tok = b"'" + arg + b"'"
        tokens.append(tok)
        args.append(arg)
    seps = [draw(st.sampled_from([b" ", b"  ", b"\t", b" \t "])) for _ in tokens]
    lead = draw(st.sampled_from([b"", b" ", b"\t"]))
    line = lead + b"".join(t + s for t, s in zip(tokens, seps, strict=True)).rstrip(b" \t")
    return line + draw(st.sampled_from([b"\r\n", b"\n"])), args


@st.composite
def command_stream(draw) -> tuple[bytes, list[list[bytes]]]:
    parts, expected = [], []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["mb", "mb", "inline", "empty"]))
        if kind == "mb":
            args = draw(st.lists(mb_arg, min_size=1, max_size=6))
            parts.append(multibulk(args))
            expected.append(args)
        elif kind == "inline":
            line, args = draw(inline_command())
            parts.append(line)
            expected.append(args)
        else:  # Redis treats *0, negative counts and blank lines as no command at all
            parts.append(draw(st.sampled_from([b"*0\r\n", b"*-1\r\n", b"*-10\r\n", b"\r\n", b"\n", b"   \r\n"])))
    return b"".join(parts), expected


chunking = st.lists(st.integers(min_value=1, max_value=70_000), min_size=1, max_size=12)


# -- valid streams -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@SETTINGS
@given(stream=command_stream(), sizes=chunking)
def test_any_split_yields_the_same_commands_as_one_feed(stream, sizes, receive):
    data, expected = stream
    assert drive(new_parser(), data, receive=receive) == expected
    assert drive(new_parser(), data, sizes, receive=receive) == expected
    if len(data) < 20_000:
        assert drive(new_parser(), data, [1], receive=receive) == expected


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@SETTINGS
@given(stream=command_stream(), sizes=chunking, repeat=st.integers(2, 4))
def test_one_parser_handles_many_requests_in_sequence(stream, sizes, repeat, receive):
    """State must fully reset between commands: the same stream parsed ``repeat`` times in one connection."""
    data, expected = stream
    assert drive(new_parser(), data * repeat, sizes, receive=receive) == expected * repeat


@SETTINGS
@given(line_args=inline_command())
def test_inline_quoting_round_trips(line_args):
    line, args = line_args
    assert drive(new_parser(), line) == [args]


def test_large_bulk_exactly_at_and_around_big_arg_threshold():
    for n in (BIG_ARG - 1, BIG_ARG, BIG_ARG + 1, 2 * BIG_ARG, 300_000):
        value = bytes(range(256)) * (n // 256) + b"x" * (n % 256)
        data = multibulk([b"SET", b"k", value]) + multibulk([b"GET", b"k"])
        for sizes in (None, [1, 7, 65536], [n + 10], [3, n - 5, 1, 1, 1]):
            assert drive(new_parser(), data, sizes) == [[b"SET", b"k", value], [b"GET", b"k"]], (n, sizes)


def test_large_bulk_is_received_in_place():
    """The docstring's promise: after the header, get_buffer() is the tail of the value's own bytearray."""
    p = new_parser()
    out: list = []
    value = b"v" * (5 * BIG_ARG)
    header = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % len(value)
    buf = p.get_buffer()
    buf[: len(header)] = header
    buf.release()
    p.feed(len(header), out)
    buf = p.get_buffer()
    assert len(buf) == len(value), "the receive buffer for a big bulk should be exactly the value's length"
    buf[:] = value
    buf.release()
    p.feed(len(value), out)
    assert out == []
    buf = p.get_buffer()
    buf[:2] = b"\r\n"
    buf.release()
    p.feed(2, out)
    assert [[bytes(a) for a in c] for c in out] == [[b"SET", b"k", value]]


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@pytest.mark.parametrize("size", [32 * 1024 * 1024 + 1, 40 * 1024 * 1024 + 3])
@pytest.mark.parametrize("sizes", [None, [1 << 20], [300_001, 7_000_003, 65_536]])
def test_bulks_above_the_upfront_allocation_arrive_intact(size, sizes, receive):
    """A declared length above what the parser allocates up front: the buffer grows while bytes arrive."""
    value = bytes(range(251)) * (size // 251) + b"q" * (size % 251)
    data = multibulk([b"SET", b"k", value]) + multibulk([b"GET", b"k"])
    p = new_parser(max_bulk=128 << 20, query_limit=256 << 20)
    got = drive(p, data, sizes, receive=receive)
    assert len(got) == 2 and got[1] == [b"GET", b"k"]
    assert got[0][:2] == [b"SET", b"k"] and len(got[0][2]) == size and got[0][2] == value


# -- random bytes --------------------------------------------------------------------------------------------

junk_piece = st.one_of(
    st.binary(min_size=0, max_size=64),
    st.sampled_from(
        [b"*", b"$", b"\r\n", b"\n", b"*1\r\n", b"*2\r\n", b"$3\r\n", b"$-1\r\n", b"*-1\r\n", b'"', b"'", b"\\x"]
    ),
    st.builds(lambda n: b"$%d\r\n" % n, st.integers(-5, 2 * BIG_ARG)),
    st.builds(lambda n: b"*%d\r\n" % n, st.integers(-5, 2**40)),
)


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@settings(deadline=None, max_examples=250, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(junk_piece, min_size=1, max_size=30),
    sizes=chunking,
    authenticated=st.booleans(),
    max_bulk=st.sampled_from([BIG_ARG, MAX_BULK]),
)
def test_random_bytes_raise_only_protocol_errors(pieces, sizes, authenticated, max_bulk, receive):
    data = b"".join(pieces)
    p = new_parser(authenticated=authenticated, max_bulk=max_bulk, query_limit=QUERY_LIMIT)
    try:
        commands = drive(p, data, sizes, receive=receive)
    except ProtocolError as exc:
        assert exc.message.startswith("ERR Protocol error: ")
        assert "\r" not in exc.message and "\n" not in exc.message
        return
    except DropConnection:
        return
    for cmd in commands:
        assert cmd, "an empty argument list must never be yielded"
        assert all(isinstance(a, bytes) for a in cmd)


@pytest.mark.parametrize("receive", RECEIVE_PATHS)
@settings(deadline=None, max_examples=80, suppress_health_check=[HealthCheck.too_slow])
@given(prefix=command_stream(), bad=st.sampled_from(range(8)), sizes=chunking)
def test_commands_before_bad_bytes_are_delivered_whatever_the_split(prefix, bad, sizes, receive):
    data, expected = prefix
    suffixes = [
        (b"*1\r\nfoo\r\n", "expected '$', got 'f'"),
        (b"*3000000000\r\n", "invalid multibulk length"),
        (b"*1\r\n$-10\r\n", "invalid bulk length"),
        (b"*1\r\n$blabla\r\n", "invalid bulk length"),
        (b'SET "a b\r\n', "unbalanced quotes in request"),
        (b"*1\r\n$%d\r\n" % (MAX_BULK + 1), "invalid bulk length"),
        (b"a" * (INLINE_MAX + 2), "too big inline request"),
        (b"*" + b"1" * (INLINE_MAX + 2), "too big mbulk count string"),
    ]
    suffix, message = suffixes[bad]
    with pytest.raises(ProtocolError) as info:
        drive(new_parser(), data + suffix, sizes, receive=receive)
    assert info.value.message == "ERR Protocol error: " + message
    assert info.value.parser_commands == expected


# -- limits, with Redis's exact texts ------------------------------------------------------------------------


def protocol_error(data: bytes, **kw) -> str:
    with pytest.raises(ProtocolError) as info:
        drive(new_parser(**kw), data)
    return info.value.message


def test_bulk_length_limit():
    assert protocol_error(b"*1\r\n$%d\r\n" % (MAX_BULK + 1)) == "ERR Protocol error: invalid bulk length"
    # exactly max_bulk is accepted (and waits for the payload)
    assert drive(new_parser(), b"*1\r\n$%d\r\n" % MAX_BULK) == []
    assert protocol_error(b"*1\r\n$-10\r\n") == "ERR Protocol error: invalid bulk length"
    assert protocol_error(b"*1\r\n$99999999999999999999\r\n") == "ERR Protocol error: invalid bulk length"


def test_multibulk_count_limit_and_no_preallocation():
    assert protocol_error(b"*%d\r\n" % (INT_MAX + 1)) == "ERR Protocol error: invalid multibulk length"
    assert protocol_error(b"*3000000000\r\n") == "ERR Protocol error: invalid multibulk length"
    assert protocol_error(b"*abc\r\n") == "ERR Protocol error: invalid multibulk length"
    tracemalloc.start()
    try:
        p = new_parser()
        base = tracemalloc.get_traced_memory()[0]
        assert drive(p, b"*%d\r\n" % INT_MAX) == []
        assert drive(p, b"$4\r\nPING\r\n") == []  # one of the INT_MAX args arrived
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - base < 1 << 20, f"declaring INT_MAX arguments cost {peak - base} bytes"


def test_unauthenticated_limits():
    assert protocol_error(b"*11\r\n", authenticated=False) == "ERR Protocol error: unauthenticated multibulk length"
    assert drive(new_parser(authenticated=False), multibulk([b"x"] * 10)) == [[b"x"] * 10]
    assert (
        protocol_error(b"*2\r\n$4\r\nAUTH\r\n$16385\r\n", authenticated=False)
        == "ERR Protocol error: unauthenticated bulk length"
    )
    ok = b"p" * 16384
    assert drive(new_parser(authenticated=False), multibulk([b"AUTH", ok])) == [[b"AUTH", ok]]
    # the same requests are fine once authenticated
    assert drive(new_parser(), multibulk([b"x"] * 11)) == [[b"x"] * 11]
    assert drive(new_parser(), multibulk([b"AUTH", b"p" * 16385])) == [[b"AUTH", b"p" * 16385]]


def test_unauthenticated_limits_apply_to_the_fast_path_too():
    """A whole small multibulk in one read takes the regex fast path; it must not bypass the unauth limits."""
    assert (
        protocol_error(multibulk([b"x"] * 11), authenticated=False)
        == "ERR Protocol error: unauthenticated multibulk length"
    )


def test_header_line_limits():
    assert protocol_error(b"a" * (INLINE_MAX + 1)) == "ERR Protocol error: too big inline request"
    assert protocol_error(b"*" + b"1" * (INLINE_MAX + 1)) == "ERR Protocol error: too big mbulk count string"
    assert protocol_error(b"*1\r\n$" + b"1" * (INLINE_MAX + 1)) == "ERR Protocol error: too big bulk count string"
    # a long line that does end is fine up to the limit
    line = b"ECHO " + b"a" * (INLINE_MAX - 100) + b"\r\n"
    assert drive(new_parser(), line) == [[b"ECHO", b"a" * (INLINE_MAX - 100)]]


def test_receive_buffer_stays_bounded_under_endless_junk():
    """Redis's desync tests: junk with no line end must be refused after ~64 KiB, not buffered forever."""
    p = new_parser()
    with pytest.raises(ProtocolError):
        for _ in range(100):  # 100 x 64 KiB at most
            drive(p, b"\x00" + b"x" * 65535)
    assert len(p._buf) <= 4 * INLINE_MAX + BIG_ARG * 8


def test_query_buffer_limit_drops_the_connection():
    with pytest.raises(DropConnection):
        drive(
            new_parser(query_limit=1 << 20, max_bulk=4 << 20),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % ((1 << 20) + 1),
        )
    # the limit counts the whole command, not one argument
    data = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (600_000, b"k" * 600_000, 600_000)
    with pytest.raises(DropConnection):
        drive(new_parser(query_limit=1 << 20), data)


def test_unbalanced_quotes_and_quote_followed_by_text():
    for line in (b'SET "a b\r\n', b"SET 'a b\r\n", b'ECHO "a"b\r\n', b"ECHO 'a'b\r\n", b'ECHO "a\\"\r\n'):
        assert protocol_error(line) == "ERR Protocol error: unbalanced quotes in request", line


def test_expected_dollar_error_names_the_byte():
    assert protocol_error(b"*1\r\nfoo\r\n") == "ERR Protocol error: expected '$', got 'f'"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"*01\r\n$4\r\nPING\r\n", "invalid multibulk length"),
        (b"*-0\r\n", "invalid multibulk length"),
        (b"*1\r\n$04\r\nPING\r\n", "invalid bulk length"),
        (b"*1\r\n$-0\r\n", "invalid bulk length"),
    ],
)
def test_lengths_with_leading_zeros_are_refused_like_redis(data, message):
    """Redis parses lengths with string2ll, which rejects leading zeros and '-0' (checked against redis-server
    7.0.15 over a raw socket: every one of these gets the error and a close)."""
    assert protocol_error(data) == "ERR Protocol error: " + message


# -- regressions found by the properties above ---------------------------------------------------------------

PAD = b"*1\r\n$4\r\nPING\r\n" * 6  # makes a read long enough (> 64 bytes) for the batch path


def test_inline_command_between_multibulks_in_one_read():
    """A pipeline may mix multibulk and inline requests (Redis executes all of them)."""
    assert drive(new_parser(), PAD + b"PING\r\n" + PAD) == [[b"PING"]] * 13
    assert drive(new_parser(), PAD + b"ECHO 'a b'\r\n" + PAD) == [[b"PING"]] * 6 + [[b"ECHO", b"a b"]] + [[b"PING"]] * 6


def test_resp_reply_types_inside_a_request_are_protocol_errors():
    """A request is an array of *bulk* strings. Simple strings, verbatim strings, bignums, blob errors... inside
    a request are 'expected $' protocol errors, whatever else is in the same read."""
    cases = [
        (b"*1\r\n+PING\r\n" * 4 + b"*1\r\n=8\r\ntxt:PING\r\n" * 3 + PAD, "expected '$', got '+'"),
        (b"*1\r\n=8\r\ntxt:PING\r\n" + PAD, "expected '$', got '='"),
        (b"*1\r\n!3\r\nabc\r\n" + PAD, "expected '$', got '!'"),
        (b"*1\r\n(123\r\n" + PAD, "expected '$', got '('"),
    ]
    for data, message in cases:
        assert protocol_error(data) == "ERR Protocol error: " + message, data


@pytest.mark.parametrize("kind", [b"*", b"~", b">", b"%", b"|"])
def test_huge_nested_aggregate_counts_allocate_nothing(kind):
    """hiredis allocates an aggregate's list as soon as it reads the count, so the batch path must never hand it
    a large declared count (inside a request, or as the first request of a read)."""
    data = PAD + b"*1\r\n" + kind + b"2000000000\r\n" + PAD
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        message = protocol_error(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert message == f"ERR Protocol error: expected '$', got '{kind.decode()}'"
    assert peak - base < 1 << 20, f"a declared count of 2e9 cost {peak - base} bytes"


def test_huge_first_count_in_a_long_read_allocates_nothing():
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert drive(new_parser(), b"*2000000000\r\n" + b"$4\r\nPING\r\n" * 20) == []  # 20 of 2e9 arguments
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - base < 1 << 20, f"a declared count of 2e9 cost {peak - base} bytes"


@pytest.mark.parametrize("sizes", [None, [1], [7], [64]])
def test_bytes_after_a_bulk_are_skipped_like_redis_on_every_path(sizes):
    """Redis skips the two bytes after a bulk without looking at them; hiredis (the batch path) does too, so the
    general path must agree whatever the split. Also true of a large bulk received in place."""
    big = b"v" * (BIG_ARG + 5)
    data = PAD + b"*2\r\n$4\r\nECHO\r\n$2\r\nhixx" + PAD + b"*2\r\n$3\r\nGET\r\n$%d\r\n%s!!" % (len(big), big) + PAD
    expected = [[b"PING"]] * 6 + [[b"ECHO", b"hi"]] + [[b"PING"]] * 6 + [[b"GET", big]] + [[b"PING"]] * 6
    assert drive(new_parser(), data, sizes) == expected


@pytest.mark.parametrize(
    "element",
    [b":5\r\n", b"-ERR x\r\n", b"_\r\n", b"#t\r\n", b",1.5\r\n", b"(123\r\n", b"+OK\r\n", b"=7\r\ntxt:abc\r\n"]
    + [kind + b"1\r\n$1\r\na\r\n" for kind in (b"*", b"%", b"~", b">", b"|")],
)
def test_every_resp3_type_inside_a_request_is_refused_on_the_batch_path(element):
    """hiredis parses all of these (some as bytes); Redis answers 'expected $' for each, and so must kvd."""
    data = PAD + b"*2\r\n$4\r\nECHO\r\n" + element + PAD
    assert protocol_error(data) == f"ERR Protocol error: expected '$', got '{chr(element[0])}'"


def test_a_false_alarm_in_a_long_pipeline_costs_only_its_own_request():
    """A value that looks like a risky header ('\\r\\n+...') sends that request to the general path; the requests
    before and after it are still parsed, in order, whatever the split."""
    values = [b"v%d" % i for i in range(200)]
    values[150] = b"a\r\n+b\r\n$99999\r\n"
    data = b"".join(multibulk([b"SET", b"k%d" % i, v]) for i, v in enumerate(values))
    for sizes in (None, [4096], [777]):
        assert drive(new_parser(), data, sizes) == [[b"SET", b"k%d" % i, v] for i, v in enumerate(values)]
