"""Before/after: kvd builds side by side with redis-server, in alternating rounds, one workload at a time.

``bench_server.py`` compares kvd with Redis over every workload once; its cells move by 10-15 % between runs on
these shared 2-core machines, more than most single changes are worth. This script answers the narrower
question a change asks: is build B faster than build A on this workload? It starts every target once and then
runs the same workload against each in turn, for ``--rounds`` rounds, flipping the order every round, so slow
spells of the machine hit every target alike. It reports medians and ranges, and each target's server CPU per
request split into user and system time (``/proc/PID/stat``, all threads): the split says whether a change
moved kvd's Python or the kernel's work.

Targets:

    redis                     Debian's redis-server
    kvd                       this checkout, on this interpreter (.venv)
    kvd=/path/to/checkout     another checkout of kvd (git worktree add /tmp/base HEAD~1), on this interpreter
    kvd@/path/to/python       this checkout on another interpreter (which must have kvd's dependencies)
    kvd=/path@/path/python    both
    kvd-asyncio               kvd on plain asyncio instead of uvloop (KVD_EVENT_LOOP), with =TREE and @PYTHON too

Examples (the commands behind docs/benchmarks.md, "Which interpreter"):

    .venv/bin/python scripts/bench_ab.py --pin --op SET --size 256K --rounds 20 redis kvd@/tmp/pyenv-venv/bin/python kvd
    .venv/bin/python scripts/bench_ab.py --redis-benchmark 1 --persistence everysec --rounds 8 redis kvd=/tmp/base kvd
    .venv/bin/python scripts/bench_ab.py --redis-benchmark 1 --command "PFADD hll __rand_int__" --rounds 6 redis kvd
    .venv/bin/python scripts/bench_ab.py --redis-benchmark 1 --setup "PFADD a x y" --command "PFCOUNT a" redis kvd

``--pin`` puts the client processes on CPU 0 and every server on CPU 1: with one client, where the scheduler
places client and server moves a cell by up to 1.7x between rounds, which pinning removes (it also removes the
second core from the server, so pinned numbers are for comparing builds, not for the tables).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_lib as bl
import bench_server as bs


def parse_size(text: str) -> int:
    units = {"K": bl.KiB, "M": bl.MiB}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def parse_target(target: str) -> tuple[str, str, str]:
    """``kvd=TREE@PYTHON`` -> ("kvd", TREE, PYTHON); the parts not given are empty."""
    head, _, python = target.partition("@")
    kind, _, tree = head.partition("=")
    if kind not in ("redis", "kvd", "kvd-asyncio") or (kind == "redis" and (tree or python)):
        raise SystemExit(f"unknown target {target!r}: redis, kvd[-asyncio], kvd=TREE, kvd@PYTHON or kvd=TREE@PYTHON")
    return kind, tree, python


def start(target: str, args: argparse.Namespace, workdir: Path, index: int) -> bs.Server:
    kind, tree, python = parse_target(target)
    cpus = "1" if args.pin else ""
    if kind == "redis":
        srv = bs.start_redis(f"t{index}", args.persistence, workdir, cpus=cpus)
    else:
        tree_path = Path(tree).resolve() if tree else bs.ROOT
        loop = "asyncio" if kind == "kvd-asyncio" else "uvloop"
        srv = bs.start_kvd(
            f"t{index}", loop, args.persistence, workdir, python=python or bs.PY, tree=tree_path, cpus=cpus
        )
    srv.name = f"{index}:{target}"
    return srv


def one_round(srv: bs.Server, args: argparse.Namespace) -> dict[str, Any]:
    """One measurement of ``srv``: ops/s and server CPU per request (user, system) in microseconds."""
    if args.redis_benchmark is not None:
        command = shlex.split(args.command) if args.command else None
        rows = bs.redis_benchmark_round(srv, args.redis_benchmark, args.requests, args.op.lower(), command)
        row = rows[0]
        if "error" in row:
            raise SystemExit(f"redis-benchmark failed against {srv.name}: {row['error']}")
        return {"ops_s": row["rps"], "user": row["srv_user_us_op"], "sys": row["srv_sys_us_op"]}
    plan = bs.plan(args.size)
    spec = {
        "client": "raw",
        "op": args.op,
        "size": args.size,
        "port": srv.port,
        "duration": args.duration,
        "max_ops": 10_000_000,
        "cap": plan["cap"],
        "nset": args.keys,
        "nget": plan["nget"],
        "mget_n": plan["mget_n"],
        "cpus": {0} if args.pin else None,
    }
    res = bs.run_clients(spec, args.clients, pid=srv.pid)
    if "error" in res:
        raise SystemExit(f"clients failed against {srv.name}: {res['error']}")
    return {"ops_s": res["ops_s"], "user": res["srv_user_us_op"], "sys": res["srv_sys_us_op"]}


def report(results: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> None:
    what = (
        f"redis-benchmark -c 50 -r 100000 -P {args.redis_benchmark} "
        + (args.command if args.command else f"-t {args.op.lower()} -d 64")
        if args.redis_benchmark is not None
        else f"{args.op} {args.size} B, {args.clients} client(s)"
    )
    print(f"\n{what}, persistence {args.persistence}, {args.rounds} rounds{', pinned' if args.pin else ''}")
    print(f"{'target':<44} {'ops/s median':>12} {'[min - max]':>20} {'user us':>8} {'sys us':>7} {'vs first':>8}")
    first = None
    for name, rows in results.items():
        ops = [r["ops_s"] for r in rows]
        med = statistics.median(ops)
        first = first or med
        user = statistics.median(r["user"] for r in rows)
        system = statistics.median(r["sys"] for r in rows)
        spread = f"[{min(ops):.0f} - {max(ops):.0f}]"
        print(f"{name:<44} {med:12.0f} {spread:>20} {user:8.1f} {system:7.1f} {med / first:8.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="+", help="redis, kvd[-asyncio], kvd=TREE, kvd@PYTHON, kvd=TREE@PYTHON")
    ap.add_argument("--op", default="SET", choices=("SET", "GET", "MGET"))
    ap.add_argument("--size", type=parse_size, default=256 * bl.KiB, help="value size: 4096, 256K, 1M (default 256K)")
    ap.add_argument("--clients", type=int, default=1, help="client processes (default 1)")
    ap.add_argument("--keys", type=int, default=64, help="keys a SET rotates over (default 64)")
    ap.add_argument("--duration", type=float, default=1.0, help="seconds per round and target (default 1)")
    ap.add_argument("--rounds", type=int, default=10, help="alternating rounds (default 10)")
    ap.add_argument("--pin", action="store_true", help="clients on CPU 0, servers on CPU 1")
    ap.add_argument("--persistence", choices=("off", "everysec", "always", "no"), default="off")
    ap.add_argument(
        "--redis-benchmark", type=int, metavar="P", help="drive with redis-benchmark -d 64 -c 50 -P P instead"
    )
    ap.add_argument("--requests", type=int, default=200_000, help="redis-benchmark -n per round (default 200000)")
    ap.add_argument("--command", help="with --redis-benchmark: this command instead of -t OP ('PFADD h __rand_int__')")
    ap.add_argument("--setup", action="append", default=[], help="a command run on every target first (repeatable)")
    args = ap.parse_args()
    if (args.command or args.setup) and args.redis_benchmark is None:
        raise SystemExit("--command and --setup need --redis-benchmark P")
    bs.ensure_redis()
    results: dict[str, list[dict[str, Any]]] = {}
    servers: list[bs.Server] = []
    with tempfile.TemporaryDirectory(prefix="kvd-ab-") as tmp:
        try:
            for i, t in enumerate(args.targets):
                servers.append(start(t, args, Path(tmp), i))  # appended one by one: a failed start stops the rest
            for srv in servers:
                client = srv.client()
                for setup in args.setup:
                    client.call(*(word.encode() for word in shlex.split(setup)))
                client.close()
            if args.redis_benchmark is None and args.op != "SET":
                for srv in servers:
                    bs.preload([srv], args.size, bs.plan(args.size)["nget"])
            for rnd in range(args.rounds):
                order = servers if rnd % 2 == 0 else servers[::-1]
                for srv in order:
                    results.setdefault(srv.name, []).append(one_round(srv, args))
                line = "  ".join(f"{s.name}: {results[s.name][-1]['ops_s']:.0f}" for s in servers)
                print(f"round {rnd + 1}/{args.rounds}  {line}", flush=True)
        finally:
            for srv in servers:
                srv.stop()
    results = {s.name: results[s.name] for s in servers if s.name in results}
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
