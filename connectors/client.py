"""A small synchronous kvd/Redis client for the connector: few round trips, and failures become misses.

Built on redis-py (+hiredis for reply parsing). It talks to kvd or to any plain Redis-protocol server:

* ``prefix_len(keys)``: how many leading keys exist, in **one** round trip. kvd answers ``KVD.PREFIXLEN`` (which
  also touches the hits in its LRU and warms disk-resident ones); on a server that does not know the command the
  client falls back, once and for good, to pipelined ``EXISTS k`` (still one round trip; LMCache spends one per
  chunk).
* ``get_many(keys)``: ``MGET``, split into batches of at most ``max_batch_bytes``-ish so a reply never has to hold
  a whole long prompt in memory at once. With ``into=LoadBuffers(...)`` every value is received straight into a
  buffer the caller keeps and reuses (pinned host memory on CUDA), so a load costs the kernel's copy and nothing
  else: no allocation, no zero-fill, no page faults. With ``into=SharedBuffers(...)`` (``connectors/shm.py``)
  a kvd on this host copies the values into the caller's shared memory itself (``KVD.GETINTO``): one copy
  instead of the socket's two; elsewhere the same buffers take an MGET.
* ``put_many(items)``: one pipelined ``EXISTS`` round trip to skip chunks some other engine already saved, then
  pipelined ``SET`` of the rest. Values are passed as memoryviews: for large values redis-py's Python packer sends
  the buffer as its own chunk rather than concatenating it into the command (the hiredis packer would copy it),
  so the client is told to use that packer. ``put_shared(items, buffers)`` saves values that are in a
  ``SharedBuffers`` file: a kvd on this host copies them out itself (``KVD.SETFROM``), any other server gets the
  same SETs.
* ``report(counters)``: ``KVD.REPORT``; ignored on servers without it.

Failure policy: every method catches connection errors and timeouts and returns "nothing found" / "nothing
stored" (and a miss is always safe for the engine: it recomputes). After a connection failure the client stays
*down* for ``retry_after_s`` and answers misses instantly, so a dead kvd costs one connect timeout per interval
instead of one per request. One warning is logged per outage, not one per call. A replica that is loading its
primary's snapshot (``-LOADING``, redis-py's ``BusyLoadingError``) counts as down the same way: its data is
incomplete until the load ends; so does one that refuses reads while its primary is away (``-MASTERDOWN``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis._parsers.base import BaseParser
from redis.connection import PythonRespSerializer

from connectors.shm import SharedBuffers

logger = logging.getLogger("vllm.kvd.client")

# A replica that cannot serve (-LOADING is a ConnectionError; -MASTERDOWN, a replica whose primary is away under
# replica-serve-stale-data no) is down for the client as much as an unreachable server: misses, and back-off.
_NETWORK_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError, redis.exceptions.MasterDownError)


@dataclass(slots=True)
class ClientConfig:
    url: str = "redis://127.0.0.1:6379"
    timeout_ms: int = 5000
    connect_timeout_ms: int = 1000
    retry_after_s: float = 2.0
    max_batch_bytes: int = 256 * 2**20
    max_connections: int = 8


_DIRECT_READ_MIN = 64 * 1024  # values at least this large are received in place (see KvdClient._mget_into)


def _host_buffer(size: int) -> tuple[bytearray, memoryview]:
    buf = bytearray(size)
    return buf, memoryview(buf)


class LoadBuffers:
    """Receive buffers that outlive a load: value ``i`` of a ``get_many(..., into=self)`` call lands in buffer
    ``i``, and the next call overwrites it.

    Why: receiving an 8 MiB value into a fresh ``bytearray`` costs a zero-fill and, because the allocator maps and
    unmaps buffers that large, a page fault per 4 KiB before the kernel's copy even starts; reusing the buffer
    leaves only that copy (measured in ``python -m connectors.profile_io``: MGET of 16 x 8 MiB about twice as
    fast). ``allocate(size)`` returns ``(backing, writable byte view)``: a ``bytearray`` by default; the
    connector passes pinned torch tensors on CUDA so that host-to-device copies start from the received bytes.

    The caller must be done with the values of one call (on CUDA: the copies out of them must have finished)
    before the next call, and then calls ``trim()``: buffers past ``keep_bytes`` go, so one unusually long load
    does not stay resident. Trimming is the caller's step because only the caller knows when the copies out of
    the buffers are done; ``backing(i)`` stays valid for every value of a call until then.

    Complexity: O(1) per value when the buffer fits; a buffer is reallocated only when a value is larger.
    """

    __slots__ = ("_allocate", "_backing", "_views", "keep_bytes")

    def __init__(
        self, allocate: Callable[[int], tuple[Any, memoryview]] = _host_buffer, keep_bytes: int = 256 * 2**20
    ) -> None:
        self._allocate = allocate
        self.keep_bytes = keep_bytes
        self._backing: list[Any] = []
        self._views: list[memoryview] = []

    def view(self, i: int, size: int) -> memoryview:
        """A writable view of exactly ``size`` bytes of buffer ``i`` (grown or created as needed)."""
        while len(self._views) <= i:
            self._backing.append(None)
            self._views.append(memoryview(b""))
        if self._views[i].nbytes < size:
            self._backing[i], self._views[i] = self._allocate(size)
        return self._views[i][:size]

    def backing(self, i: int) -> Any:
        """What ``allocate`` returned for buffer ``i`` (a torch tensor for the connector)."""
        return self._backing[i]

    def trim(self) -> None:
        """Let go of the buffers from the first one that takes the total past ``keep_bytes``."""
        total = 0
        for i, view in enumerate(self._views):
            total += view.nbytes
            if total > self.keep_bytes:
                del self._views[i:], self._backing[i:]
                return

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self._views)


def _read_bulk_array(sock: Any, into: LoadBuffers | SharedBuffers | None = None, first: int = 0) -> list[Any]:
    """Read one RESP2/RESP3 array of bulk strings or nulls from ``sock``. Each value lands in its own new
    ``bytearray``, or, with ``into``, in buffer ``first + i`` of it (returned as a memoryview of the value)."""
    pending = bytearray()

    def line() -> bytes:
        while (end := pending.find(b"\r\n")) < 0:
            chunk = sock.recv(65536)
            if not chunk:
                raise redis.ConnectionError("connection closed while reading a reply")
            pending.extend(chunk)
        text = bytes(pending[:end])
        del pending[: end + 2]
        return text

    head = line()
    if head[:1] in (b"-", b"!"):  # redis-py's class for it: -LOADING is a BusyLoadingError, a ConnectionError
        raise BaseParser.parse_error(head[1:].decode("utf-8", "replace"))
    if head[:1] != b"*":
        raise redis.ConnectionError(f"unexpected reply to MGET: {head[:32]!r}")
    values: list[Any] = []
    for i in range(int(head[1:])):
        header = line()
        if header in (b"$-1", b"_"):
            values.append(None)
            continue
        if header[:1] != b"$":
            raise redis.ConnectionError(f"unexpected element in MGET reply: {header[:32]!r}")
        size = int(header[1:]) + 2
        value: bytearray | None = None
        if into is None:
            value = bytearray(size)
            view = memoryview(value)
        else:
            view = into.view(first + i, size)
        got = min(len(pending), size)
        view[:got] = pending[:got]
        del pending[:got]
        while got < size:
            n = sock.recv_into(view[got:])
            if not n:
                raise redis.ConnectionError("connection closed while reading a value")
            got += n
        if value is None:
            values.append(view[:-2])  # without the CRLF
            continue
        del view
        del value[-2:]  # the CRLF; shrinking by two bytes never moves the buffer
        values.append(value)
    if pending:
        raise redis.ConnectionError("unexpected bytes after an MGET reply")
    return values


def _leading(found: Sequence[bool]) -> int:
    """How many of ``found`` are true before the first false one."""
    n = 0
    for present in found:
        if not present:
            break
        n += 1
    return n


def _unknown_command(exc: redis.ResponseError) -> bool:
    text = str(exc).lower()
    return "unknown command" in text or "unknown subcommand" in text


def _shared_memory_refused(exc: redis.ResponseError) -> bool:
    """KVD.GETINTO or KVD.SETFROM not taken for good: a server without them (Redis), one that is not on this
    host, or a file it will not use (``kvd/shm.py``'s refusals); the socket does the same work instead."""
    text = str(exc)
    return _unknown_command(exc) or "is for clients on kvd's host" in text or "shared memory" in text


class _WideUnixConnection(redis.UnixDomainSocketConnection):
    """A unix socket connection with a 4 MiB send buffer (the kernel caps it at ``net.core.wmem_max``).

    A unix socket keeps ``net.core.wmem_default`` (208 KiB) where loopback TCP grows to 4 MiB, so a pipelined
    save of large values stalls every 200 KiB until the server has read them. Measured with ``put_many`` of 64
    x 1 MiB to kvd (Intel host, 12 alternating rounds, medians): 3.02 -> 3.49 GB/s (loopback TCP 3.85). kvd
    widens its own end for replies (``kvd/connection.py``)."""

    def _connect(self) -> Any:
        sock = super()._connect()
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        except OSError:
            pass  # the default buffer works, only slower
        return sock


class KvdClient:
    """Thread-safe (a connection pool underneath): the save thread and the forward thread share it."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._redis = redis.Redis.from_url(
            config.url,
            socket_timeout=config.timeout_ms / 1000,
            socket_connect_timeout=config.connect_timeout_ms / 1000,
            max_connections=config.max_connections,
            health_check_interval=0,
            retry=None,
        )
        self._use_python_packer(self._redis)
        pool = self._redis.connection_pool
        if pool.connection_class is redis.UnixDomainSocketConnection:
            pool.connection_class = _WideUnixConnection
        self._has_prefixlen: bool | None = None
        self._has_getinto: bool | None = None  # KVD.GETINTO taken (kvd on this host); False: MGET for good
        self._has_setfrom: bool | None = None  # KVD.SETFROM taken; False: SET for good
        self._has_report: bool | None = None
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._outage_logged = False
        self._thread = threading.local()  # failures seen by each calling thread

    # -- plumbing ---------------------------------------------------------------------------------------------

    @staticmethod
    def _use_python_packer(r: redis.Redis) -> None:
        """Make every new connection pack commands in Python: big values then go out uncopied (see module doc)."""
        pool = r.connection_pool
        original = pool.make_connection

        def make_connection() -> Any:
            conn = original()
            if hasattr(conn, "_command_packer"):
                conn._command_packer = PythonRespSerializer(conn._buffer_cutoff, conn.encoder.encode)
            return conn

        pool.make_connection = make_connection  # type: ignore[method-assign]

    @property
    def available(self) -> bool:
        """False while backing off after a connection failure."""
        return time.monotonic() >= self._down_until

    @property
    def failures(self) -> int:
        """How many requests of the calling thread failed on the network (a timeout, a cut connection). A caller
        that named shared memory in a request compares it before and after: where it grew, kvd may still carry
        out that request later, so the memory it named must not be reused."""
        return getattr(self._thread, "failures", 0)

    def _failed(self, what: str, exc: BaseException) -> None:
        self._thread.failures = self.failures + 1
        with self._lock:
            self._down_until = time.monotonic() + self.config.retry_after_s
            first = not self._outage_logged
            self._outage_logged = True
        if first:
            logger.warning(
                "kvd at %s unreachable during %s (%s: %s); treating as cache misses, retrying every %.1fs",
                self._safe_url(),
                what,
                type(exc).__name__,
                exc,
                self.config.retry_after_s,
            )
        # Drop pooled sockets: after a timeout a reply may still be in flight on them.
        try:
            self._redis.connection_pool.reset()
        except Exception:  # pragma: no cover - best effort
            pass

    def _ok(self) -> None:
        if self._outage_logged:
            with self._lock:
                if self._outage_logged:
                    self._outage_logged = False
                    logger.warning("kvd at %s reachable again", self._safe_url())

    def _safe_url(self) -> str:
        url = self.config.url
        if "@" in url:  # never log a password
            scheme, _, rest = url.partition("://")
            url = f"{scheme}://***@{rest.rpartition('@')[2]}"
        return url

    # -- commands ---------------------------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            ok = bool(self._redis.ping())
        except _NETWORK_ERRORS as exc:
            self._failed("PING", exc)
            return False
        self._ok()
        return ok

    def prefix_len(self, keys: Sequence[str]) -> int:
        """Count of leading ``keys`` present on the server, in one round trip; 0 on any failure."""
        if not keys or not self.available:
            return 0
        return self._prefix_lookup(
            lambda: int(self._redis.execute_command("KVD.PREFIXLEN", *keys)),
            lambda: _leading(self.exists_many(keys, raise_errors=True)),
        )

    def prefix_len_multi(self, key_lists: Sequence[Sequence[str]]) -> int:
        """The shortest prefix length over several key lists (one per TP rank), in one round trip."""
        if len(key_lists) == 1:
            return self.prefix_len(key_lists[0])
        if not key_lists or not key_lists[0] or not self.available:
            return 0

        def with_prefixlen() -> int:
            pipe = self._redis.pipeline(transaction=False)
            for keys in key_lists:
                pipe.execute_command("KVD.PREFIXLEN", *keys)
            return min(int(x) for x in pipe.execute())

        def with_exists() -> int:
            found = self.exists_many([k for keys in key_lists for k in keys], raise_errors=True)
            pos = 0
            lengths = []
            for keys in key_lists:
                lengths.append(_leading(found[pos : pos + len(keys)]))
                pos += len(keys)
            return min(lengths)

        return self._prefix_lookup(with_prefixlen, with_exists)

    def _prefix_lookup(self, with_prefixlen: Callable[[], int], with_exists: Callable[[], int]) -> int:
        """Run a prefix look-up with ``KVD.PREFIXLEN`` where the server has it (learnt from the first answer),
        else with pipelined ``EXISTS``; 0 when the server is unreachable or refuses."""
        try:
            if self._has_prefixlen is not False:
                try:
                    n = with_prefixlen()
                    self._has_prefixlen = True
                    self._ok()
                    return n
                except redis.ResponseError as exc:
                    if not _unknown_command(exc):
                        raise
                    self._has_prefixlen = False
                    logger.info("server has no KVD.PREFIXLEN; using pipelined EXISTS for prefix look-ups")
            n = with_exists()
        except _NETWORK_ERRORS as exc:
            self._failed("prefix look-up", exc)
            return 0
        except redis.ResponseError as exc:
            logger.warning("prefix look-up refused by server: %s", exc)
            return 0
        self._ok()
        return n

    def exists_many(self, keys: Sequence[str], *, raise_errors: bool = False) -> list[bool]:
        """Per-key presence via pipelined EXISTS (one round trip)."""
        if not keys:
            return []
        try:
            pipe = self._redis.pipeline(transaction=False)
            for k in keys:
                pipe.exists(k)
            return [bool(x) for x in pipe.execute()]
        except (*_NETWORK_ERRORS, redis.ResponseError) as exc:
            if raise_errors:
                raise
            if isinstance(exc, _NETWORK_ERRORS):
                self._failed("EXISTS", exc)
            return [False] * len(keys)

    def get_many(
        self, keys: Sequence[str], value_size_hint: int = 0, *, into: LoadBuffers | SharedBuffers | None = None
    ) -> list[Any]:
        """Values for ``keys`` (None where missing or on failure), MGET in byte-bounded batches; into
        ``SharedBuffers``, ``KVD.GETINTO`` where the server takes it (kvd on this host: one copy, by kvd).

        With ``into``, value ``i`` is a memoryview of buffer ``i`` of it, valid until the next call with the same
        buffers (the caller trims them in between, see ``LoadBuffers``); otherwise large values
        (``value_size_hint`` of 64 KiB and up) are fresh bytearrays and small ones whatever redis-py returns."""
        if not keys:
            return []
        if not self.available:
            return [None] * len(keys)
        per_batch = len(keys)
        if value_size_hint > 0:
            per_batch = max(1, self.config.max_batch_bytes // value_size_hint)
        out: list[Any] = []
        # One resize for the whole load, before kvd maps the file; without room in /dev/shm, this load's values
        # come through the socket, into buffers of their own past the slots there are.
        shared = isinstance(into, SharedBuffers) and into.ensure(len(keys))
        try:
            for i in range(0, len(keys), per_batch):
                batch = keys[i : i + per_batch]
                if shared and self._has_getinto is not False:
                    got = self._getinto(batch, into, i)
                    if got is not None:
                        out.extend(got)
                        continue
                if into is not None or value_size_hint >= _DIRECT_READ_MIN:
                    out.extend(self._mget_into(batch, into, i))
                else:
                    out.extend(self._redis.mget(batch))
        except _NETWORK_ERRORS as exc:
            self._failed("load", exc)
            out.extend([None] * (len(keys) - len(out)))
            return out
        except redis.ResponseError as exc:
            logger.warning("load refused by server: %s", exc)
            out.extend([None] * (len(keys) - len(out)))
            return out
        self._ok()
        return out

    def _getinto(self, keys: Sequence[str], into: SharedBuffers, first: int) -> list[Any] | None:
        """``KVD.GETINTO``: kvd copies the values into ``into``'s file itself; views of them, None for a missing
        key or one longer than a slot (never the connector's: its values have one size). None instead of the list
        where the server does not take the command (Redis, a kvd on another host): MGET from then on."""
        try:
            lengths = self._redis.execute_command("KVD.GETINTO", into.name, first * into.slot, into.slot, *keys)
        except redis.ResponseError as exc:
            if _shared_memory_refused(exc):
                logger.info("kvd: loads go through the socket (KVD.GETINTO not taken: %s)", exc)
                self._has_getinto = False
                return None
            raise
        self._has_getinto = True
        return [into.view(first + i, n) if 0 <= n <= into.slot else None for i, n in enumerate(int(n) for n in lengths)]

    def _mget_into(self, keys: Sequence[str], into: LoadBuffers | SharedBuffers | None, first: int) -> list[Any]:
        """MGET whose values are received straight into their final buffers (``into``'s from ``first`` on, or
        new bytearrays).

        redis-py (with or without hiredis) reads replies in 64 KiB pieces and reassembles each bulk string, two
        copies of every value; here each value is ``recv_into`` a buffer of its exact size, one copy (the
        kernel's). The command goes out through redis-py's connection (auth, TLS, RESP version already done);
        only the reply is read by hand. Any surprise drops the connection, so the pool never reuses a socket in
        an unknown state.
        """
        pool = self._redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command("MGET", *keys)
            return _read_bulk_array(conn._sock, into, first)  # type: ignore[attr-defined]
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)

    def put_many(self, items: Sequence[tuple[str, Any]], *, skip_existing: bool = True) -> tuple[int, int]:
        """Store ``(key, value)`` pairs; returns (values written, bytes written). Never raises."""
        values = dict(items)  # one step can complete the same chunk for two requests: each key once

        def send(pipe: Any, keys: list[str]) -> None:
            for key in keys:
                pipe.set(key, values[key])

        return self._put({k: len(memoryview(v).cast("B")) for k, v in items}, send, skip_existing)

    def put_shared(
        self, items: Sequence[tuple[str, int, int]], buffers: SharedBuffers, *, skip_existing: bool = True
    ) -> tuple[int, int]:
        """Store values that are in ``buffers``' shared memory: ``(key, slot, length)`` names the first ``length``
        bytes of slot ``slot``. A kvd on this host copies them out itself (``KVD.SETFROM``: one copy instead of
        the socket's two); any other server gets pipelined SETs of the same bytes. Returns (values written, bytes
        written). Never raises."""
        spans = {key: (slot, n) for key, slot, n in items}
        if any(not (0 <= slot < buffers.capacity and 0 <= n <= buffers.slot) for slot, n in spans.values()):
            raise ValueError(f"a value outside the {buffers.capacity} slots of {buffers.slot} bytes of {buffers.name}")

        def send(pipe: Any, keys: list[str]) -> None:
            if self._has_setfrom is not False:
                args = [x for k in keys for x in (k, spans[k][0] * buffers.slot, spans[k][1])]
                try:
                    self._redis.execute_command("KVD.SETFROM", buffers.name, *args)
                    self._has_setfrom = True
                    return
                except redis.ResponseError as exc:
                    if not _shared_memory_refused(exc):
                        raise
                    logger.info("kvd: saves go through the socket (KVD.SETFROM not taken: %s)", exc)
                    self._has_setfrom = False
            for key in keys:
                slot, n = spans[key]
                pipe.set(key, buffers.view(slot, n))

        return self._put({k: n for k, (_, n) in spans.items()}, send, skip_existing)

    def _put(
        self, sizes: dict[str, int], send: Callable[[Any, list[str]], None], skip_existing: bool
    ) -> tuple[int, int]:
        """The saves' common part: skip the keys that exist (one EXISTS round trip), then ``send`` the rest in
        batches of about ``max_batch_bytes`` (each batch: ``send`` fills a pipeline, which is then executed).
        ``sizes``: the bytes of each key's value. A failure is logged and the save counts as nothing written."""
        if not sizes or not self.available:
            return 0, 0
        try:
            todo = list(sizes)
            if skip_existing:
                present = self.exists_many(todo, raise_errors=True)
                todo = [k for k, p in zip(todo, present, strict=True) if not p]
            batch: list[str] = []
            batch_bytes = 0
            for i, key in enumerate(todo):
                batch.append(key)
                batch_bytes += sizes[key]
                if batch_bytes >= self.config.max_batch_bytes or i == len(todo) - 1:
                    pipe = self._redis.pipeline(transaction=False)
                    send(pipe, batch)
                    if len(pipe):
                        pipe.execute()
                    batch, batch_bytes = [], 0
        except _NETWORK_ERRORS as exc:
            self._failed("save", exc)
            return 0, 0
        except redis.ResponseError as exc:
            # e.g. OOM / MISCONF from the server: the save is lost, which is only a future miss.
            logger.warning("save refused by server: %s", exc)
            return 0, 0
        self._ok()
        return len(todo), sum(sizes[k] for k in todo)

    def report(self, counters: dict[str, int]) -> bool:
        """Send counter increments with KVD.REPORT; False (silently) where the server lacks it or is down."""
        items = [x for name, v in counters.items() if v for x in (name, int(v))]
        if not items or self._has_report is False or not self.available:
            return False
        try:
            self._redis.execute_command("KVD.REPORT", *items)
            self._has_report = True
            return True
        except redis.ResponseError as exc:
            if _unknown_command(exc):
                self._has_report = False
            return False
        except _NETWORK_ERRORS:
            return False

    def discard(self, keys: Sequence[str]) -> int:
        """Delete values the caller found damaged, so that they are saved afresh once recomputed (saves skip keys
        that exist); how many went, 0 where the server could not be reached. Never raises."""
        if not keys or not self.available:
            return 0
        try:
            return int(self._redis.delete(*keys))
        except _NETWORK_ERRORS as exc:
            self._failed("discard", exc)
        except redis.ResponseError as exc:
            logger.warning("discard refused by server: %s", exc)
        return 0

    def delete(self, keys: Sequence[str]) -> int:
        """Delete keys (tests and tools)."""
        return int(self._redis.delete(*keys)) if keys else 0

    def raw(self) -> redis.Redis:
        """The underlying redis-py client (tests and tools)."""
        return self._redis

    def close(self) -> None:
        try:
            self._redis.close()
            self._redis.connection_pool.disconnect()
        except Exception:  # pragma: no cover
            pass
