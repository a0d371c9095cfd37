"""The replica's offset counts each command of the primary's stream as the bytes it took: its canonical RESP
encoding. A wrong count makes a reconnecting replica skip or repeat part of the stream."""

from __future__ import annotations

import random

from kvd.replica import command_size, encode_command


def test_command_size_is_the_length_of_the_encoded_command() -> None:
    rng = random.Random(7)
    lengths = [0, 1, 9, 10, 99, 100, 4095, 4096, 65536, 1 << 20]
    for _ in range(2000):
        argv = [bytes(rng.choice(lengths)) for _ in range(rng.randint(1, 12))]
        assert command_size(argv) == len(encode_command(*argv))
    argv = [b"x"] * 10  # the array's own count past one digit
    assert command_size(argv) == len(b"*10\r\n" + b"$1\r\nx\r\n" * 10)


def test_views_and_bytearrays_count_as_their_bytes() -> None:
    argv = [b"SET", bytearray(b"key"), memoryview(b"value")]
    assert command_size(argv) == len(b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n")
