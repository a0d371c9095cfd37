"""The replica's offset counts each command of the primary's stream as the bytes it took: its canonical RESP
encoding. A wrong count makes a reconnecting replica skip or repeat part of the stream."""

from __future__ import annotations

import random

from kvd.replica import FsyncedOffset, command_size, encode_command


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


class FakeLog:
    """What FsyncedOffset reads of SegmentLog: its policy, its counters, and ``sync_then``, answered by hand."""

    def __init__(self, appendfsync: str = "everysec") -> None:
        self.appendfsync = appendfsync
        self.appended_records = 0
        self.failures = 0
        self.syncs: list = []

    def sync_then(self, callback) -> None:
        self.syncs.append(callback)


def test_fack_names_only_an_offset_an_fsync_has_proven() -> None:
    """FACK moves to the offset applied when the log was asked to fsync, once that fsync succeeded: not to what
    was applied meanwhile, not on a failed fsync, at once when nothing was appended since the last proof, never
    with appendfsync no, and no more after a lost write until a full synchronisation starts a new history."""
    log, fack, sent = FakeLog(), FsyncedOffset(), []
    proven = lambda: sent.append(fack.offset)  # noqa: E731 - the ACK a proof sends
    log.appended_records = 5
    fack.prove(log, 100, proven)
    assert fack.offset == 0 and len(log.syncs) == 1
    log.appended_records = 7  # more writes of the stream, applied up to 150
    fack.prove(log, 150, proven)
    assert len(log.syncs) == 1  # one fsync asked at a time
    log.syncs.pop()(True)
    assert fack.offset == 100 and sent == [100]
    fack.prove(log, 150, proven)
    log.syncs.pop()(False)
    assert fack.offset == 100 and sent == [100]
    fack.prove(log, 150, proven)
    log.syncs.pop()(True)
    assert fack.offset == 150
    fack.prove(log, 180, proven)  # PINGs and reads since: nothing appended, nothing to fsync
    assert fack.offset == 180 and not log.syncs
    log.appended_records, log.failures = 8, 1  # a write the log lost
    fack.prove(log, 200, proven)
    assert fack.offset == 180 and not log.syncs
    fack.prove(log, 190, proven)
    assert fack.offset == 180
    fack.reset(log)  # a full synchronisation: a new history, its data loaded anew
    assert fack.offset == 0
    fack.prove(log, 50, proven)
    stale = log.syncs.pop()
    fack.reset(log)
    stale(True)  # a proof of the history before
    assert fack.offset == 0
    fack.prove(log, 60, proven)
    log.syncs.pop()(True)
    assert fack.offset == 60
    never = FakeLog("no")
    never.appended_records = 1
    fack = FsyncedOffset()
    fack.prove(never, 10, proven)
    assert fack.offset == 0 and not never.syncs
