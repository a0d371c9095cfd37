"""kvd/protocol/landing.py's header check and its C twin in kvd/protocol/_receive.c: the same verdict on every
prefix of valid, foreign and damaged requests, so which one runs never changes what a request means."""

from __future__ import annotations

import random

import pytest

from kvd.protocol.landing import Template, match_header_python

try:
    from kvd.protocol._receive import match_header
except ImportError:  # tests/unit/test_buffers.py fails the set-up for it; these have nothing to compare
    match_header = None
pytestmark = pytest.mark.skipif(match_header is None, reason="kvd.protocol._receive was not built")
TEMPLATE = Template(b"SET", 10, 1000)


def request(key: bytes, value_len: int = 1000, name: bytes = b"SET") -> bytes:
    head = b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n" % (len(name), name, len(key), key, value_len)
    return head + b"v" * value_len + b"\r\n"


SAMPLES = [
    request(b"k" * 10),
    request(b""),
    request(b"k" * 74),  # the longest key the template takes
    request(b"k" * 75),  # one byte longer
    request(b"key", 999),  # another value length
    request(b"key", name=b"GET"),
    request(b"key", name=b"APPEND"),
    b"*3\r\n$3\r\nSET\r\n$01\r\nk",  # a leading zero
    b"*3\r\n$3\r\nSET\r\n$-1\r\n",
    b"*3\r\n$3\r\nSET\r\n$" + b"9" * 25 + b"\r\n",  # more digits than any length
    b"*3\r\n$3\r\nSET\r\n$" + b"9" * 20 + b"\r\n",
    b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
    b"PING\r\n",
]


def verdicts(data: bytes) -> None:
    for filled in range(len(data) + 1):
        args = (TEMPLATE.prefix, TEMPLATE.suffix, TEMPLATE.key_max)
        c = match_header(bytearray(data), filled, *args)
        py = match_header_python(bytearray(data), filled, *args)
        assert c == py, (data[:filled], c, py)


@pytest.mark.parametrize("data", SAMPLES)
def test_both_agree_on_every_prefix(data):
    verdicts(data[:80])


def test_both_agree_on_damaged_headers():
    rnd = random.Random(5)
    for _ in range(400):
        data = bytearray(rnd.choice(SAMPLES)[:60])
        for _ in range(rnd.randint(1, 3)):
            data[rnd.randrange(len(data))] = rnd.choice(b"0123456789\r\n$*SETx-")
        verdicts(bytes(data))


def test_a_whole_header_gives_its_length_and_key():
    data = request(b"chunk:0001")
    header = data.index(b"v")
    assert match_header(bytearray(data), len(data), TEMPLATE.prefix, TEMPLATE.suffix, TEMPLATE.key_max) == (
        header,
        b"chunk:0001",
    )
    assert match_header(bytearray(data), header, TEMPLATE.prefix, TEMPLATE.suffix, TEMPLATE.key_max) == (
        header,
        b"chunk:0001",
    )
    assert match_header(bytearray(data), header - 1, TEMPLATE.prefix, TEMPLATE.suffix, TEMPLATE.key_max) is None


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError):
        match_header(b"bytes, not a bytearray", 3, TEMPLATE.prefix, TEMPLATE.suffix, 10)
    with pytest.raises(ValueError):
        match_header(bytearray(4), 5, TEMPLATE.prefix, TEMPLATE.suffix, 10)
