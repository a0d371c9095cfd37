"""Argument parsing shared by command handlers, with Redis's exact rules and error texts."""

from __future__ import annotations

import time

from kvd.protocol import errors
from kvd.protocol.errors import CommandError

LLONG_MAX = 2**63 - 1
LLONG_MIN = -(2**63)


def parse_int(raw: bytes | bytearray, message: str = errors.NOT_INTEGER) -> int:
    """Redis ``string2ll``: optional '-', digits, no spaces, no '+', no leading zeros, fits in 64 bits."""
    text = bytes(raw)
    digits = text[1:] if text[:1] == b"-" else text
    if (
        not digits
        or not digits.isdigit()
        or len(text) > 20
        or (len(digits) > 1 and digits[:1] == b"0")
        or text == b"-0"
    ):
        raise CommandError(message)
    value = int(text)
    if not LLONG_MIN <= value <= LLONG_MAX:
        raise CommandError(message)
    return value


def check_db_index(raw: bytes | bytearray) -> None:
    """SELECT's and COPY DB's index: Redis reads a C int, then refuses every database but the ones it has;
    kvd has one, database 0."""
    index = parse_int(raw)
    if not -(2**31) <= index < 2**31:  # getIntFromObjectOrReply's words, its grammar included
        raise CommandError("ERR value is out of range, value must between -2147483648 and 2147483647")
    if index != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)


def lower(raw: bytes | bytearray) -> bytes:
    return bytes(raw).lower()


def c_word(raw: bytes | bytearray) -> bytes:
    """An argument as C's string functions see it: up to its first NUL byte (``string2ll(p, strlen(p))``)."""
    return bytes(raw).split(b"\0", 1)[0]


def option(raw: bytes | bytearray) -> bytes:
    """An option as Redis's ``strcasecmp`` compares it: lowercased, up to its first NUL byte."""
    return c_word(raw).lower()


def text(raw: bytes | bytearray) -> str:
    return bytes(raw).decode("utf-8", "surrogateescape")


def parse_timeout_ms(raw: bytes | bytearray) -> int:
    """Redis's ``getTimeoutFromObjectOrReply`` in milliseconds (WAIT, WAITAOF, CLIENT PAUSE): an integer, not
    negative, and not so large that now plus it passes 2^63 - 1."""
    ms = parse_int(raw, "ERR timeout is not an integer or out of range")
    if ms < 0:
        raise CommandError("ERR timeout is negative")
    if ms > LLONG_MAX - time.time_ns() // 1_000_000:
        raise CommandError("ERR timeout is out of range")
    return ms
