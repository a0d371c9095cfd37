"""A client's shared memory on kvd's host: where ``KVD.GETINTO`` copies values instead of sending them, and
where ``KVD.SETFROM`` copies them from instead of receiving them.

A load through a socket moves every byte twice: kvd's send copies it into the kernel, the client's receive
copies it out, and either side wakes once per piece in between. A client on kvd's host can instead create a
POSIX shared-memory object (``/dev/shm/kvd-...``) and name it: kvd maps that file and copies each value into
its slot there, one copy and no system call per piece, and the client reads the values where they landed (the
connector's are page-locked, so the GPU copies straight from them). A save goes the same way back: the client
gathers values into slots of such a file and names them, and kvd copies each one out into a buffer of its own.
What that buys is measured in docs/benchmarks.md ("Loopback TCP, the unix socket and shared memory").

What kvd accepts, so that no client can make it write, or read, where it should not:

* only clients on kvd's host: the unix socket, or TCP from 127.0.0.1 or ::1 (``Client.local``);
* only files in ``/dev/shm`` whose name is ``kvd-`` and then letters, digits, ``.``, ``_`` or ``-``: kvd never
  writes into a file that was not made for it;
* opened without following links, and only a regular file owned by kvd's own user (run the engine and kvd as
  the same user, or load through the socket);
* large enough for every slot asked, and allocated, both checked right before each copy: touching a shared
  mapping past the end of its file kills the process with SIGBUS, and so does touching a hole of a sparse file
  once ``/dev/shm`` is full (a container's is often 64 MiB: tmpfs gives a hole a page on first touch, read or
  write). So a file shrunk under kvd is refused, not written, and
  so is one whose blocks are not all allocated (``st_blocks``; the client ``posix_fallocate``s its file). (A
  process of kvd's own user that shrinks the file between that check and the copy can still crash kvd; such a
  process could as well kill it.)

The copies themselves run on ``Copier``'s threads, off the event loop (below). Each connection keeps its
mappings, at most ``MAX_MAPPINGS`` (the least recently used is unmapped first), until it closes; a file replaced
under the same name (another inode) or resized is mapped afresh. Complexity: O(1) system calls per command once
mapped (a ``stat`` and an ``fstat``), plus the copies.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import re
import stat
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvd import buffers
from kvd.protocol.errors import CommandError

SHM_DIR = "/dev/shm"
MAX_MAPPINGS = 4
_NAME = re.compile(rb"kvd-[A-Za-z0-9._-]{1,200}")


class _Mapped:
    __slots__ = ("fd", "identity", "map", "view")

    def __init__(self, fd: int, identity: tuple[int, int], size: int) -> None:
        self.fd = fd
        self.identity = identity
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.map)

    def close(self) -> None:
        self.view.release()
        try:
            self.map.close()
        except BufferError:
            pass  # a command still holds a slice: the mapping goes with the last view of it
        os.close(self.fd)


class SharedMemory:
    """One connection's mapped shared-memory files, by name."""

    __slots__ = ("_maps",)

    def __init__(self) -> None:
        self._maps: OrderedDict[bytes, _Mapped] = OrderedDict()

    def view(self, name: bytes, size: int) -> memoryview:
        """A writable view of the first ``size`` bytes of ``/dev/shm/<name>``; CommandError saying why not."""
        shown = name.decode("utf-8", "replace")
        if not _NAME.fullmatch(name):
            raise CommandError(
                f"ERR invalid shared memory name '{shown}': kvd writes only into /dev/shm/kvd-* (letters, digits, "
                "'.', '_', '-')"
            )
        path = os.path.join(SHM_DIR, name.decode())
        try:
            st = os.stat(path, follow_symlinks=False)
        except FileNotFoundError:
            raise CommandError(f"ERR no shared memory '{shown}' in {SHM_DIR}: the client creates it first") from None
        except OSError as exc:
            raise CommandError(f"ERR shared memory '{shown}': {exc.strerror or exc}") from None
        mapped = self._maps.get(name)
        if mapped is not None and (mapped.identity != (st.st_dev, st.st_ino) or len(mapped.view) != st.st_size):
            self._drop(name)  # replaced under the same name, or resized: mapped afresh at its size now
            mapped = None
        if mapped is None:
            mapped = self._map(name, path, shown)
        self._maps.move_to_end(name)
        now = os.fstat(mapped.fd)  # the file may have shrunk since it was mapped
        if now.st_size < size or len(mapped.view) < size:
            raise CommandError(
                f"ERR shared memory '{shown}' holds {min(now.st_size, len(mapped.view))} bytes, {size} needed"
            )
        if now.st_blocks * 512 < size:
            raise CommandError(
                f"ERR shared memory '{shown}' is not allocated (the client posix_fallocates it): kvd does not write "
                "into holes that a full /dev/shm could not fill"
            )
        return mapped.view[:size]

    def _map(self, name: bytes, path: str, shown: str) -> _Mapped:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            raise CommandError(f"ERR shared memory '{shown}': {exc.strerror or exc}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CommandError(f"ERR shared memory '{shown}' is not a regular file")
            if st.st_uid != os.geteuid():
                raise CommandError(f"ERR shared memory '{shown}' is not owned by kvd's user (uid {os.geteuid()})")
            if st.st_size == 0:
                raise CommandError(f"ERR shared memory '{shown}' is empty")
            mapped = _Mapped(fd, (st.st_dev, st.st_ino), st.st_size)
        except BaseException:
            os.close(fd)
            raise
        self._maps[name] = mapped
        while len(self._maps) > MAX_MAPPINGS:
            self._drop(next(iter(self._maps)))
        return mapped

    def _drop(self, name: bytes) -> None:
        self._maps.pop(name).close()

    def close(self) -> None:
        """Unmap everything (the connection closed)."""
        while self._maps:
            self._drop(next(iter(self._maps)))


COPY_THREADS = max(1, min(4, os.cpu_count() or 1))
INLINE_COPY_MAX = 1 << 20  # below this much in all, copying on the loop costs less than handing it over
PART_MIN = 4 << 20  # no thread is handed less than this: below it the hand-over costs more than it saves


class Copier:
    """``KVD.GETINTO``'s and ``KVD.SETFROM``'s copies on worker threads, the GIL released during each ``memcpy``
    (``kvd/buffers.py``).

    Two reasons. The event loop is free meanwhile: on the loop's own thread, the copies of a 32k-token load of an
    8B model (4.3 GB) would hold every other client for about 0.7 s (their pace on the H200 host measured,
    docs/connector.md). And the copies run side by side: one thread copies at 5-6 GB/s on the hosts measured,
    where memory bandwidth allows several times that. A job under
    ``INLINE_COPY_MAX`` in all is copied on the loop, where a hand-over would cost more than it saves.

    The threads start on first use; ``close`` waits for copies in flight and stops them."""

    __slots__ = ("_pool", "threads")

    def __init__(self, threads: int = COPY_THREADS) -> None:
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def inline(self, jobs: list[tuple[memoryview, Any]]) -> bool:
        """Whether ``jobs`` are small enough to copy on the loop (``copy_now``)."""
        return sum(len(dst) for dst, _ in jobs) < INLINE_COPY_MAX

    @staticmethod
    def copy_now(jobs: list[tuple[memoryview, Any]]) -> None:
        """Copy every pair on the calling thread (a worker's share, or a small job on the loop)."""
        for dst, src in jobs:
            buffers.copy(dst, src)

    async def copy(self, jobs: list[tuple[memoryview, Any]]) -> None:
        """Copy every ``(dst, src)`` pair, the bytes split into one equal share per thread (a value across two
        shares if need be, small values grouped); returns when all are done."""
        if self.inline(jobs):
            self.copy_now(jobs)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kvd-copy")
        total = sum(len(dst) for dst, _ in jobs)
        share = max(PART_MIN, -(-total // self.threads))  # each thread's bytes, in one hand-over
        groups: list[list[tuple[memoryview, memoryview]]] = [[]]
        room = share
        for dst, src in jobs:
            source = memoryview(src).cast("B")
            start = 0
            while start < len(dst):
                if room == 0:
                    groups.append([])
                    room = share
                n = min(room, len(dst) - start)
                groups[-1].append((dst[start : start + n], source[start : start + n]))
                start += n
                room -= n
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, self.copy_now, group) for group in groups))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
