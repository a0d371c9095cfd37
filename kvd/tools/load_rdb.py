"""``kvd-load-rdb FILE``: write the string keys of an RDB file into a running kvd (or Redis).

The way back from ``redis-cli --rdb``: restore a kvd backup, or move a Redis dataset of strings into kvd. With
``-`` it reads standard input, so one pipe copies a live server into another::

    redis-cli -p 6380 --rdb - | kvd-load-rdb - --port 6379

Each batch of up to 1000 keys or ``--batch-bytes`` (8 MiB) is one round trip: the keys without a deadline in
one ``MSET``, the others as ``SET key value PXAT deadline`` (every key as ``SET ... NX`` with ``--no-replace``).
One MSET of 1000 small keys costs the server about half of 1000 SETs. Keys whose deadline has passed are
skipped, as Redis skips them when it loads a file. The tool holds one batch at a time (``kvd/persist/rdb.py``
reads one value at a time), so a file larger than this machine's memory loads too.

A file (not a pipe) is read twice: once to check it whole, structure and checksum, so that a damaged file
writes nothing; then to load it. From a pipe there is one pass, and damage found at the end (the checksum) is
reported after the earlier batches were written.

Exit status: 0 when every key was written; 1 when the file is damaged or not one kvd can load (another type
than strings without ``--skip-other-types``, keys of a database other than 0 without ``--skip-other-databases``,
function libraries without ``--skip-functions``: the message names the byte offset; kvd has database 0 only, and
merging a file's databases into it would let one database's key overwrite another's), when the
server refuses a write (the first refusal is printed, with its key: OOM, MISCONF, NOAUTH), or when it cannot be
reached. Keys written before the error stay written, and the message says how many.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import redis

from kvd.persist.rdb import RdbError, RdbReader

BATCH_KEYS = 1000


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    client = redis.Redis(
        host=args.host, port=args.port, username=args.user, password=args.password, socket_timeout=args.timeout
    )
    loader = Loader(client, replace=not args.no_replace, batch_bytes=args.batch_bytes)
    try:
        with sys.stdin.buffer if args.file == "-" else open(args.file, "rb") as f:
            if f.seekable():  # a file, not a pipe: check it whole before the first write
                for _ in RdbReader(f, args.skip_other_types, args.skip_other_databases, args.skip_functions):
                    pass
                f.seek(0)
            reader = RdbReader(f, args.skip_other_types, args.skip_other_databases, args.skip_functions)
            loader.load(reader)
    except OSError as exc:
        return _fail(f"{args.file}: {exc.strerror or exc}", loader)
    except RdbError as exc:
        return _fail(f"{args.file}: {exc}", loader)
    except redis.RedisError as exc:
        return _fail(f"{args.host}:{args.port}: {exc}", loader)
    print(
        loader.summary(args.file, f"{args.host}:{args.port}", reader.skipped, reader.other_databases, reader.functions)
    )
    return 0


class Loader:
    """Writes keys through ``client`` in pipelined batches; counts what it did."""

    def __init__(self, client: redis.Redis, *, replace: bool = True, batch_bytes: int = 8 << 20) -> None:
        self.client = client
        self.replace = replace
        self.batch_bytes = batch_bytes
        self.written = 0  # keys the server confirmed
        self.existing = 0  # --no-replace: keys left as they were
        self.expired = 0
        self.bytes = 0

    def load(self, reader: RdbReader) -> None:
        now = int(time.time() * 1000)
        batch: list[tuple[bytes, bytes, int]] = []
        batch_bytes = 0
        for key, value, expire_at in reader:
            if expire_at and expire_at <= now:
                self.expired += 1
                continue
            batch.append((key, value, expire_at))
            batch_bytes += len(key) + len(value)
            if len(batch) >= BATCH_KEYS or batch_bytes >= self.batch_bytes:
                self._send(batch)
                batch_bytes = 0
        self._send(batch)

    def _send(self, batch: list[tuple[bytes, bytes, int]]) -> None:
        """One round trip: the keys without a deadline in one MSET (half the server's work of a SET each, for
        small keys), the others as SET PXAT; with --no-replace every key as SET NX."""
        pipe = self.client.pipeline(transaction=False)
        plain = {key: value for key, value, expire_at in batch if not expire_at} if self.replace else {}
        if plain:
            pipe.mset(plain)
        singles = [(key, value, expire_at) for key, value, expire_at in batch if key not in plain]
        for key, value, expire_at in singles:
            pipe.set(key, value, pxat=expire_at or None, nx=not self.replace)
        replies = pipe.execute(raise_on_error=False)
        if plain:
            self._count(replies.pop(0), list(plain), sum(len(k) + len(v) for k, v in plain.items()))
        for (key, value, _), reply in zip(singles, replies, strict=True):
            self._count(reply, [key], len(key) + len(value))
        batch.clear()

    def _count(self, reply: object, keys: list[bytes], nbytes: int) -> None:
        if isinstance(reply, redis.ResponseError):
            first = keys[0][:100]
            which = f"key {first!r}" if len(keys) == 1 else f"an MSET of {len(keys)} keys from {first!r}"
            raise redis.ResponseError(f"the server refused {which}: {reply}")
        if reply:
            self.written += len(keys)
            self.bytes += nbytes
        else:
            self.existing += 1  # SET NX answers nil for a key that exists

    def summary(
        self,
        source: str,
        target: str,
        other_types: dict[str, int] | None = None,
        other_databases: dict[int, int] | None = None,
        functions: int = 0,
    ) -> str:
        text = f"loaded {self.written} keys ({self.bytes} bytes of keys and values) from {source} into {target}"
        skipped = [f"{self.expired} expired"] if self.expired else []
        if self.existing:
            skipped.append(f"{self.existing} already there (--no-replace)")
        if other_types:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(other_types.items()))
            skipped.append(f"{sum(other_types.values())} of other types ({kinds})")
        if other_databases:
            dbs = ", ".join(f"{n} in database {db}" for db, n in sorted(other_databases.items()))
            skipped.append(f"{sum(other_databases.values())} of other databases ({dbs})")
        if functions:
            skipped.append(f"{functions} function {'library' if functions == 1 else 'libraries'}")
        return text + (f"; skipped {', '.join(skipped)}" if skipped else "")


def _fail(message: str, loader: Loader) -> int:
    done = f" ({loader.written} keys were written before it)" if loader.written else ""
    print(f"kvd-load-rdb: {message}{done}", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kvd-load-rdb",
        description="Write the string keys of an RDB file (redis-cli --rdb, Redis's dump.rdb: RDB versions 1 to "
        "12, as Redis up to 7.4 writes them, and Valkey 9.0's 80) into a running kvd or Redis.",
    )
    p.add_argument("file", help="the RDB file, or - for standard input")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--user", default=None, help="AUTH user (with --password)")
    p.add_argument("-a", "--password", default=None, help="AUTH password")
    p.add_argument("--no-replace", action="store_true", help="leave keys that exist as they are (SET NX)")
    p.add_argument(
        "--skip-other-types",
        action="store_true",
        help="pass over lists, sets, sorted sets, hashes and streams (counted) instead of stopping at the first",
    )
    p.add_argument(
        "--skip-other-databases",
        action="store_true",
        help="pass over the keys of databases other than 0 (counted) instead of stopping at the first; kvd has "
        "database 0 only",
    )
    p.add_argument(
        "--skip-functions",
        action="store_true",
        help="pass over the function libraries of a Redis 7 file (counted) instead of stopping at the first; kvd "
        "has no scripting",
    )
    p.add_argument("--batch-bytes", type=int, default=8 << 20, help="bytes per pipelined batch (default 8 MiB)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a batch's replies")
    return p


if __name__ == "__main__":
    sys.exit(main())
