"""Recovery and disk-tier benchmark: restart time per GB of segments, against the disk's own read speed.

    .venv/bin/python scripts/bench_recovery.py                # 2 GB
    .venv/bin/python scripts/bench_recovery.py --sizes 2 10   # 2 GB and 10 GB (needs ~12 GB free)

For each size it fills a kvd (persistence on, 4 MiB values, 256 MiB segments, RAM tier 256 MiB), kills it with
SIGKILL, and measures, in the same run:

* the disk's sequential read speed over the same segment files (O_DIRECT, so the page cache does not flatter it);
* restart time until PING answers, with the hint files (sealed segments need no value reads; only the active
  tail is scanned) and without them (every record of every segment is read and its checksum verified);
* GET of a value from the disk tier against GET of a value from RAM.

Recovery is reported in GB/s and as a ratio to the measured read speed. kvd's page cache is dropped before each
restart when the kernel allows it (root, not in a restricted container); the output says whether it was.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1 << 20
REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Raw:
    def __init__(self, port: int) -> None:
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def line(self) -> bytes:
        out = bytearray()
        while not out.endswith(b"\r\n"):
            chunk = self.s.recv(1)
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def set(self, key: bytes, value: bytes) -> None:
        self.s.sendmsg([b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, len(value)), value, b"\r\n"])
        assert self.line() == b"+OK\r\n"

    def get(self, key: bytes, into: bytearray) -> None:
        self.s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(key), key))
        assert self.line() == b"$%d\r\n" % (len(into) - 2)
        view, got = memoryview(into), 0
        while got < len(into):
            got += self.s.recv_into(view[got:])


def start(port: int, data: Path, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    cmd = [
        sys.executable,
        "-m",
        "kvd",
        "--port",
        str(port),
        "--dir",
        str(data),
        "--maxmemory",
        "256mb",
        "--segment-size",
        "256mb",
        "--max-disk",
        "0",
        "--loglevel",
        "warning",
    ]
    started = time.monotonic()
    with open(log, "ab") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=f, cwd=REPO)
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16) == b"+PONG\r\n":
                    return proc, time.monotonic() - started
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"kvd exited: {log.read_text()[-2000:]}") from None
            if time.monotonic() - started > 900:
                raise RuntimeError("kvd did not come up in 15 minutes") from None
            time.sleep(0.01)


def drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def direct_read_speed(files: list[Path]) -> float:
    """Sequential read of the files with O_DIRECT, 8 MiB requests: the device, not the page cache."""
    buf = mmap.mmap(-1, 8 * MiB)
    total, started = 0, time.monotonic()
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:  # a filesystem without O_DIRECT (tmpfs): fall back to a cold buffered read
            fd = os.open(path, os.O_RDONLY)
        try:
            while (n := os.readv(fd, [buf])) > 0:
                total += n
        finally:
            os.close(fd)
    return total / (time.monotonic() - started)


def bench(size_gb: float, workdir: Path) -> dict[str, float | bool | str]:
    data = workdir / f"data-{size_gb:g}gb"
    log = workdir / "kvd.log"
    port = free_port()
    proc, _ = start(port, data, log)
    client = Raw(port)
    value = os.urandom(4 * MiB)
    count = int(size_gb * 1024 / 4)
    t0 = time.monotonic()
    for i in range(count):
        client.set(b"chunk:%d" % i, value)
    fill = count * len(value) / (time.monotonic() - t0)
    # disk tier vs RAM: the first keys were demoted long ago, the last ones are hot
    into = bytearray(len(value) + 2)
    hot = [b"chunk:%d" % (count - 1 - i) for i in range(8)]
    cold = [b"chunk:%d" % i for i in range(0, 8 * 64, 64)]
    t0 = time.monotonic()
    for key in hot * 4:
        client.get(key, into)
    ram = 32 * len(value) / (time.monotonic() - t0)
    t0 = time.monotonic()
    for key in cold:
        client.get(key, into)
    disk = 8 * len(value) / (time.monotonic() - t0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    files = sorted(data.glob("*.seg"))
    on_disk = sum(p.stat().st_size for p in files)
    dropped = drop_caches()
    read_speed = direct_read_speed(files)
    dropped = drop_caches() and dropped
    proc, with_hints = start(port, data, log)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for hint in data.glob("*.hint"):
        hint.unlink()
    drop_caches()
    proc, without_hints = start(port, data, log)
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    shutil.rmtree(data)
    return {
        "GB": on_disk / 1e9,
        "fill GB/s": fill / 1e9,
        "disk read GB/s": read_speed / 1e9,
        "restart s (hints)": with_hints,
        "restart s (full scan)": without_hints,
        "full scan GB/s": on_disk / without_hints / 1e9,
        "full scan / disk read": on_disk / without_hints / read_speed,
        "GET RAM GB/s": ram / 1e9,
        "GET disk tier GB/s": disk / 1e9,
        "disk tier / RAM": disk / ram,
        "page cache dropped": dropped,
    }


def main() -> None:
    p = argparse.ArgumentParser(description="kvd recovery and disk-tier benchmark")
    p.add_argument("--sizes", type=float, nargs="+", default=[2.0], help="GB of segments per run")
    p.add_argument("--dir", default=None, help="where to put the data (default: a temp dir under the repo's disk)")
    a = p.parse_args()
    workdir = Path(
        a.dir or tempfile.mkdtemp(prefix="kvd-bench-", dir=REPO / ".cache" if (REPO / ".cache").exists() else None)
    )
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        results = [bench(size, workdir) for size in a.sizes]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    keys = list(results[0])
    print(f"{'':24s}" + "".join(f"{r['GB']:>12.2f} GB" for r in results))
    for key in keys[1:]:
        cells = "".join(f"{r[key]:>15.3f}" if isinstance(r[key], float) else f"{r[key]!s:>15s}" for r in results)
        print(f"{key:24s}{cells}")


if __name__ == "__main__":
    main()
