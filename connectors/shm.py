"""Buffers in shared memory that kvd reads and writes itself, for an engine on kvd's host: loads
(``KVD.GETINTO``) and saves (``KVD.SETFROM``).

Through a socket every byte is copied twice (the sender's send, the receiver's receive); through shared memory
kvd copies it once. A load lands where the engine reads it, and on CUDA the file is page-locked, so the copies to
the GPU start from it; a save is gathered from the GPU straight into the file and kvd copies it out into memory
of its own. The server side, and what it accepts, is ``kvd/shm.py``.

``SharedBuffers`` has ``LoadBuffers``'s interface (``view``, ``backing``, ``trim``), so the connector's load
path is the same for both; ``KvdClient.get_many(..., into=shared)`` uses ``KVD.GETINTO`` and falls back to MGET
into the same buffers where the server does not take it (Redis, a remote kvd). For saves the connector keeps a
second file of a fixed number of slots, one per queued save: ``KvdClient.put_shared`` names their slots in
``KVD.SETFROM``, or SETs their bytes where that is not taken.

The file: ``/dev/shm/kvd-<pid namespace>-<pid>-<random>``, mode 0600, allocated up front, one slot of
``slot`` bytes per value, made larger for a longer load (resized in place: kvd maps it afresh) and brought back
to ``keep_bytes`` by ``trim``. It is removed by ``close``, at exit, or when the object is collected; a killed
process leaves it behind, so a new one removes the files of processes that no longer exist (in its own pid
namespace only: another container sharing the directory has pids of its own).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import re
import secrets
import weakref
from collections.abc import Callable
from typing import Any

SHM_DIR = "/dev/shm"
_OURS = re.compile(r"kvd-(\d+)-(\d+)-[0-9a-f]+")  # kvd-<pid namespace>-<pid>-<random>


def _pid_namespace() -> str:
    """This process's pid namespace (the inode of /proc/self/ns/pid), "0" where it cannot be read: pids are
    only comparable within one, and containers that share a /dev/shm may each have their own."""
    try:
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]") or "0"
    except OSError:
        return "0"


def available() -> bool:
    """Whether this host has POSIX shared memory where kvd looks for it."""
    return os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK)


def remove_orphans() -> list[str]:
    """Remove the files of processes of this pid namespace that no longer exist (killed engines); their names."""
    removed = []
    namespace = _pid_namespace()
    with contextlib.suppress(OSError):
        for name in os.listdir(SHM_DIR):
            m = _OURS.fullmatch(name)
            if m is None or m.group(1) != namespace or _alive(int(m.group(2))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive, and not ours to judge
    return True


class SharedBuffers:
    """``capacity`` slots in one shared-memory file; value ``i`` of a load lands in slot ``i``, and a save names the
    slot its value is in. A slot is ``slot``
    bytes rounded up to whole pages, so that every value starts aligned for any element type.

    ``wrap(mapping)`` turns the file's mapping into what ``backing`` slices (the connector: a torch tensor,
    page-locked on CUDA); by default a memoryview. A value longer than ``slot`` (received by the MGET fallback),
    or past the slots ``/dev/shm`` had room for, goes into a buffer of its own from ``allocate(size)``, which
    returns ``(backing, writable byte view)`` as for ``LoadBuffers`` (the connector: a host tensor, so that
    ``backing`` is of one kind either way); by default a bytearray.

    ``count`` is the number of slots allocated up front, ``keep_bytes`` worth by default: buffers made for one
    load pass the number of its values, so that a load takes what it needs, not a whole ``keep_bytes``.
    """

    def __init__(
        self,
        slot: int,
        keep_bytes: int = 256 * 2**20,
        wrap: Callable[[mmap.mmap], Any] | None = None,
        allocate: Callable[[int], tuple[Any, memoryview]] | None = None,
        count: int | None = None,
    ) -> None:
        if slot < 1:
            raise ValueError("slot must be at least one byte")
        self.slot = -(-slot // mmap.PAGESIZE) * mmap.PAGESIZE  # each value starts on a page, as its own buffer would
        self.keep_bytes = keep_bytes
        self._wrap = wrap or memoryview
        self._allocate = allocate or _bytearray
        remove_orphans()
        self.name = f"kvd-{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(8)}"
        self._path = os.path.join(SHM_DIR, self.name)
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self._finalizer = weakref.finalize(self, _remove, self._path, self._fd)
        self.capacity = 0
        self._map: mmap.mmap | None = None
        self._backing: Any = None
        self._view: memoryview | None = None
        self._overflow: dict[int, tuple[Any, memoryview]] = {}
        try:
            self._resize(max(1, keep_bytes // self.slot if count is None else count))
        except OSError:
            self.close()  # no room in /dev/shm: the caller loads through the socket instead
            raise

    def ensure(self, count: int) -> bool:
        """Room for ``count`` values (the file grows; kvd maps it afresh at its next copy); False where
        ``/dev/shm`` has no room for it (values past ``capacity`` then get buffers of their own)."""
        if count > self.capacity:
            try:
                self._resize(count)
            except OSError:
                return False
        return True

    def view(self, i: int, size: int) -> memoryview:
        """A writable view of ``size`` bytes for value ``i``: its slot, or a buffer of its own if it is longer or
        past the slots there was room for."""
        if size <= self.slot and i < self.capacity:
            assert self._view is not None
            return self._view[i * self.slot : i * self.slot + size]
        backing, view = self._allocate(size)
        self._overflow[i] = (backing, view[:size])
        return self._overflow[i][1]

    def backing(self, i: int) -> Any:
        """What holds value ``i``: a slice of ``wrap(mapping)`` (from the slot's start), or its own buffer."""
        if i in self._overflow:
            return self._overflow[i][0]
        return self._backing[i * self.slot : (i + 1) * self.slot]

    def trim(self) -> None:
        """Back to ``keep_bytes`` of slots after a long load, and drop buffers of longer values."""
        self._overflow.clear()
        keep = max(1, self.keep_bytes // self.slot)
        if self.capacity > keep:
            self._resize(keep)

    def close(self) -> None:
        self._view = self._backing = self._map = None
        self._overflow.clear()
        self._finalizer()

    def _resize(self, count: int) -> None:
        size = count * self.slot
        if count > self.capacity:
            # Every page allocated now: a write into a hole of a full /dev/shm is SIGBUS, for kvd as for us, and
            # kvd refuses files that are not allocated. ENOSPC here is an OSError the caller sees.
            os.posix_fallocate(self._fd, 0, size)
        self._view = self._backing = None  # the old mapping goes once nothing uses it
        os.ftruncate(self._fd, size)
        self._map = mmap.mmap(self._fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._view = memoryview(self._map)
        self._backing = self._wrap(self._map)
        self.capacity = count


def _bytearray(size: int) -> tuple[bytearray, memoryview]:
    buf = bytearray(size)
    return buf, memoryview(buf)


def _remove(path: str, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.close(fd)
