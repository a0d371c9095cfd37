"""A client's shared-memory files in /dev/shm, as the KVD.GETINTO and KVD.SETFROM tests make them."""

from __future__ import annotations

import os
from pathlib import Path

SHM = Path("/dev/shm")


def grow(path: Path, size: int) -> None:
    """Make ``path`` ``size`` bytes, every block allocated, as a client does (kvd refuses holes)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
