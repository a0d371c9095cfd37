"""Scanning a segment whose size is a multiple of the page size, with an unreadable page right after it.

A torn tail after ``kill -9`` makes recovery search the rest of the file for the next record magic. On
CPython 3.11 before 3.11.5 (Debian bookworm's 3.11.2 is what CI runs) ``mmap.find`` reads one byte past the
end it is given (gh-105235); at the end of a page-aligned mapping that byte is the next page, and if nothing
is mapped there the daemon dies with SIGSEGV on restart. CI saw exactly that once. The child process below
places each mapping right below a PROT_NONE page (the kernel hands out mmaps top-down, so a mapping made just
after the guard ends where the guard starts, unless a hole higher up fits it: then that try stays mapped to fill
the hole and the next one is made), checks in /proc/self/maps where it landed, and scans.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvd.persist.record import FILE_HDR_SIZE, HDR_SIZE, REC_MAGIC, SET, checksum, encode_header, scan

CHILD = textwrap.dedent(
    """
    import mmap, os, sys
    from kvd.persist.record import FILE_HDR_SIZE, scan

    PAGE = mmap.PAGESIZE
    path = sys.argv[1]
    guarded = 0

    def mappings(path):  # {start: (end, start of the next mapping, its permissions)} for each mapping of path
        lines = open("/proc/self/maps").read().splitlines()
        found = {}
        for line, nxt in zip(lines, lines[1:]):
            if line.endswith(path):
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                found[lo] = (hi, int(nxt.split()[0].split("-")[0], 16), nxt.split()[1])
        return found

    for pages in range(1, 65):
        size = pages * PAGE
        with open(path, "wb") as f:  # a file header, then bytes with no record magic: resync runs to the end
            f.write(bytes(FILE_HDR_SIZE) + b"x" * (size - FILE_HDR_SIZE))
        fd = os.open(path, os.O_RDONLY)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        held = []  # a try that landed in a hole higher up stays mapped, so the next one cannot land there
        for _ in range(128):  # bounded: each failed try fills a hole
            before = mappings(path)
            guard = mmap.mmap(-1, PAGE * (pages + 1), flags=flags, prot=0)
            mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            held += [guard, mm]
            (hi, nxt_lo, nxt_perm), = [v for k, v in mappings(path).items() if k not in before]
            res = scan(mm, FILE_HDR_SIZE, size)
            assert res.records == [] and res.good_end == FILE_HDR_SIZE, res
            if nxt_lo == hi and nxt_perm == "---p":
                guarded += 1
                break
        for m in held:
            m.close()
        os.close(fd)
    print(guarded)
    """
)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc/self/maps to place the guard page")
def test_a_torn_tail_ending_on_a_page_boundary_scans_without_reading_past_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "0000000001.seg")], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"scan crashed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    guarded = int(proc.stdout.strip())
    assert guarded >= 60, f"only {guarded} of 64 sizes got a mapping right below an unreadable page: not a test"


def test_a_record_that_only_just_fits_after_garbage_is_still_found() -> None:
    """The search stops where a header no longer fits; the smallest record (empty key and value) at the very end
    is the edge of that bound."""
    record = encode_header(SET, 0, 0, 0, 7, checksum(b"", b""))
    assert len(record) == HDR_SIZE
    for garbage in (b"", b"z", b"zz" + REC_MAGIC + b"zzz", bytes(100)):
        buf = bytes(FILE_HDR_SIZE) + garbage + record
        res = scan(buf, FILE_HDR_SIZE, len(buf))
        assert [(r.offset, r.lsn) for r in res.records] == [(len(buf) - HDR_SIZE, 7)], garbage
        assert res.good_end == len(buf)
