"""DUMP payloads: Redis's CRC-64 and LZF in C and in Python agree, and broken payloads are refused cleanly."""

from __future__ import annotations

import os
import random

import pytest

from kvd.persist import dump
from kvd.persist.dump import PayloadError, crc64_python, dump_payload, load_payload, lzf_decompress_python

C = pytest.mark.skipif(dump.crc64 is None, reason="kvd/persist/_dump.c was not built")

# A payload redis-server 7.0.15 wrote for 100 'a's: LZF-compressed (0xc3), version 10.
REDIS_LZF = bytes.fromhex("00c3094064016161e057000161610a00e8a3b507b06df271")


def test_crc64_check_value_in_python():
    assert crc64_python(b"123456789") == 0xE9C6D914C4B8D9CA


@C
def test_c_and_python_agree_on_random_inputs():
    rng = random.Random(7)
    for n in (0, 1, 7, 8, 9, 63, 1000, 4097):
        data = rng.randbytes(n)
        assert dump.crc64(data) == crc64_python(data)
        assert dump.crc64(memoryview(data)[1:]) == crc64_python(data[1:])


def test_round_trip_and_integer_encodings():
    for value in (b"", b"0", b"-128", b"127", b"-32768", b"2147483647", b"2147483648", b"007", b"x" * 70_000):
        assert load_payload(dump_payload(value)) == value
    assert dump_payload(b"12")[:2] == b"\x00\xc0"  # as Redis writes it: an int8
    assert dump_payload(b"012")[:2] == b"\x00\x03"  # not an integer's own text: a string


def test_a_redis_lzf_payload_loads(monkeypatch):
    if load_payload(REDIS_LZF) != b"a" * 100:
        pytest.fail("the LZF payload did not decode")
    monkeypatch.setattr(dump, "lzf_decompress", None)  # the Python fallback too
    monkeypatch.setattr(dump, "crc64", None)
    assert load_payload(REDIS_LZF) == b"a" * 100


def test_broken_payloads_get_redis_errors_and_nothing_worse():
    good = dump_payload(b"hello world")
    with pytest.raises(PayloadError) as broken:
        load_payload(good[:-1] + b"\x00")
    assert broken.value.message == "ERR DUMP payload version or checksum are wrong"
    list_payload = b"\x12" + good[1:-10]
    list_payload += good[-10:-8] + dump.crc64_python(list_payload + good[-10:-8]).to_bytes(8, "little")
    with pytest.raises(PayloadError) as other_type:
        load_payload(list_payload)
    assert "holds a list" in other_type.value.message
    rng = random.Random(3)
    for _ in range(300):  # random bodies with a valid trailer: refused or decoded, never a crash
        body = bytes([0]) + os.urandom(rng.randrange(0, 40))
        body += b"\x0a\x00"
        payload = body + crc64_python(body).to_bytes(8, "little")
        try:
            load_payload(payload)
        except PayloadError:
            pass


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_lzf_refuses_streams_that_point_outside(decoder):
    decode = lzf_decompress_python if decoder == "python" else dump.lzf_decompress
    if decode is None:
        pytest.skip("kvd/persist/_dump.c was not built")
    with pytest.raises(ValueError):
        decode(b"\xe0\xff\x00", 10)  # a back reference before the start
    with pytest.raises(ValueError):
        decode(b"\x05ab", 6)  # a literal run longer than the input
    with pytest.raises(ValueError):
        decode(b"\x00a", 5)  # shorter than announced
    assert decode(b"\x00a\x40\x00", 5) == b"aaaaa"  # an overlapping reference repeats
