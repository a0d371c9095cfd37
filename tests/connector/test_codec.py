"""Value codec: a round trip returns the payload; any mismatch or corruption is refused (a miss, never a load)."""

from __future__ import annotations

import os
import struct

import pytest

from connectors import codec

LAYOUT = b"L" * 16
CHASH = bytes(range(16))
SHAPE = (4, 2, 3, 8)
ITEM = 4
PAYLOAD = os.urandom(4 * 2 * 3 * 8 * ITEM)


def _value(**kw) -> bytearray:
    args = dict(dtype="float32", shape=SHAPE, layout_fp=LAYOUT, chunk_hash=CHASH)
    args.update(kw)
    return codec.encode(PAYLOAD, **args)


def _decode(value, **kw) -> memoryview:
    args = dict(dtype="float32", shape=SHAPE, itemsize=ITEM, layout_fp=LAYOUT, chunk_hash=CHASH)
    args.update(kw)
    return codec.decode(bytes(value), **args)


@pytest.mark.parametrize("algo", [codec.ALGO_XXH3, codec.ALGO_BLAKE2B])
def test_round_trip(algo: int) -> None:
    v = _value(algo=algo)
    assert len(v) == codec.header_size(len(SHAPE)) + len(PAYLOAD)
    assert codec.header_size(len(SHAPE)) % 64 == 0
    assert bytes(_decode(v)) == PAYLOAD
    h = codec.read_header(v)
    assert (h.dtype, h.shape, h.layout_fp, h.chunk_hash, h.payload_len) == (
        "float32",
        SHAPE,
        LAYOUT,
        CHASH,
        len(PAYLOAD),
    )


def test_seal_in_place_matches_encode() -> None:
    hdr = codec.header_size(len(SHAPE))
    buf = bytearray(hdr + len(PAYLOAD))
    buf[hdr:] = PAYLOAD
    codec.seal(buf, dtype="float32", shape=SHAPE, layout_fp=LAYOUT, chunk_hash=CHASH)
    assert buf == _value()


def test_decode_returns_a_view_not_a_copy() -> None:
    v = bytes(_value())
    mv = _decode(v)
    assert mv.obj is v


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        ({"dtype": "bfloat16"}, "dtype"),
        ({"shape": (4, 2, 3, 9)}, "shape"),
        ({"shape": (2, 4, 3, 8)}, "shape"),
        ({"layout_fp": b"M" * 16}, "layout"),
        ({"chunk_hash": b"\1" * 16}, "chunk hash"),
        ({"itemsize": 2}, "length"),
    ],
)
def test_reader_expectation_mismatch_is_refused(kw: dict, reason: str) -> None:
    with pytest.raises(codec.CodecError, match=reason):
        _decode(_value(), **kw)


def test_every_single_bit_flip_is_refused() -> None:
    v = _value()
    hdr = codec.header_size(len(SHAPE))
    # Every header byte, and a sample of payload bytes.
    positions = list(range(hdr)) + list(range(hdr, len(v), 37))
    for pos in positions:
        bad = bytearray(v)
        bad[pos] ^= 0x01
        with pytest.raises(codec.CodecError):
            _decode(bad)


def test_truncated_and_extended_values_are_refused() -> None:
    v = _value()
    for cut in (0, 3, 20, codec.header_size(len(SHAPE)), len(v) - 1):
        with pytest.raises(codec.CodecError):
            _decode(v[:cut])
    with pytest.raises(codec.CodecError):
        _decode(v + b"\0")


def test_foreign_values_are_refused() -> None:
    for foreign in (b"", b"hello", b"\0" * 4096, os.urandom(4096)):
        with pytest.raises(codec.CodecError):
            _decode(foreign)


def test_other_format_version_is_refused() -> None:
    v = _value()
    struct.pack_into("<H", v, 4, codec.VERSION + 1)
    with pytest.raises(codec.CodecError, match="version"):
        _decode(v)


def test_noise_payload_with_valid_header_passes_the_codec() -> None:
    # The codec cannot know the numbers are wrong: this is what the end-to-end noise test relies on.
    noise = os.urandom(len(PAYLOAD))
    v = codec.encode(noise, dtype="float32", shape=SHAPE, layout_fp=LAYOUT, chunk_hash=CHASH)
    assert bytes(_decode(v)) == noise
