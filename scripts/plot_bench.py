#!/usr/bin/env python
"""Render docs/bench/results.json (written by scripts/bench_server.py) as PNGs in docs/bench/.

    .venv/bin/pip install matplotlib        # once; not a kvd dependency
    .venv/bin/python scripts/plot_bench.py [--json docs/bench/results.json] [--out docs/bench]

bench-values.png: SET/GET/MGET throughput per value size, 1 and 4 clients, for redis-server, kvd (uvloop),
kvd (asyncio), the loopback ceiling, the store ceiling and (4 clients) their one-thread twins. bench-small.png:
redis-benchmark req/s (-d 64, with/without -P 16), the 512-key prefix look-up latency and the memory per key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COLORS = {
    "redis": "#d62728",
    "kvd": "#1f77b4",
    "kvd-asyncio": "#7fb3e0",
    "ceiling": "#777777",
    "ceiling-store": "#aaaaaa",
    "ceiling-1t": "#cccccc",
    "ceiling-1t-store": "#e4e4e4",
}
MiB, KiB = 1 << 20, 1 << 10


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend, imported when a plot is drawn (``--help`` works without it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def human(n: int) -> str:
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def find(rows: list[dict], **kw: object) -> dict | None:
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()) and "error" not in r:
            return r
    return None


def plot_values(data: dict, path: Path) -> None:
    plt = _pyplot()
    runs = [r for r in data["runs"] if r["client"] == "raw"]
    sizes = sorted({r["size"] for r in runs})
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5), sharey=False)
    for row, conc in enumerate((1, 4)):
        names = tuple(COLORS)  # the ceiling-1t ones: only with 4 clients
        targets = [t for t in names if any(r["target"] == t and r["conc"] == conc for r in runs)]
        width = 0.8 / max(1, len(targets))
        for col, op in enumerate(("SET", "GET", "MGET")):
            ax = axes[row][col]
            for i, t in enumerate(targets):
                ys = []
                for s in sizes:
                    r = find(runs, target=t, op=op, size=s, conc=conc)
                    ys.append(r["gbps"] if r else 0.0)
                xs = [x + (i - (len(targets) - 1) / 2) * width for x in range(len(sizes))]
                ax.bar(xs, ys, width, label=t, color=COLORS.get(t))
                if t == "kvd":
                    for x, s, y in zip(xs, sizes, ys, strict=True):
                        r = find(runs, target="kvd", op=op, size=s, conc=conc)
                        if r and r.get("vs_redis"):
                            ax.annotate(f"{r['vs_redis']:.2f}x", (x, y), ha="center", va="bottom", fontsize=7)
            labels = []
            for s in sizes:
                r = find(runs, op=op, size=s, conc=conc)
                labels.append(f"{r.get('mget_n', 1)}x{human(s)}" if op == "MGET" and r else human(s))
            ax.set_xticks(range(len(sizes)), labels, fontsize=8)
            ax.set_title(f"{op}, {conc} client{'s' if conc > 1 else ''}")
            ax.set_ylabel("GB/s (payload)")
            ax.grid(axis="y", alpha=0.3)
            if col == 0:
                ax.legend(fontsize=8)
    m = data["meta"]
    fig.suptitle(
        f"kvd vs redis-server vs loopback ceiling, raw RESP client (labels: kvd / redis)\n"
        f"{m['cpu']} x{m['cpus']}, Python {m['python']}, {m['redis_server'].split(' sha')[0]}, "
        f"persistence {m['persistence']}, kvd {m['kvd_commit']}, {m['date']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_small(data: dict, path: Path) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    rb = data.get("redis_benchmark", [])
    names = [n for n in ("redis", "kvd", "kvd-asyncio") if any(x["target"] == n for x in rb)]
    cases = [(p, t) for p in (1, 16) for t in ("SET", "GET")]
    width = 0.8 / max(1, len(names))
    ax = axes[0]
    for i, n in enumerate(names):
        ys = []
        for p, t in cases:
            r = next((x for x in rb if x["target"] == n and x["pipeline"] == p and x["test"] == t), None)
            ys.append(r.get("rps", 0.0) / 1000 if r else 0.0)
        xs = [x + (i - (len(names) - 1) / 2) * width for x in range(len(cases))]
        ax.bar(xs, ys, width, label=n, color=COLORS.get(n))
    ax.set_xticks(range(len(cases)), [f"{t} -P {p}" for p, t in cases])
    ax.set_ylabel("k req/s")
    ax.set_title("redis-benchmark -d 64 -c 50")
    ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)

    ax = axes[1]
    pre = [r for r in data.get("prefix", []) if "error" not in r]
    labels, vals, cols = [], [], []
    for r in pre:
        labels.append(f"{r['client']} / {r['target']} / {'KVD.PREFIXLEN' if r['op'] == 'PREFIXLEN' else '512 EXISTS'}")
        vals.append(r["p50_ms"])
        cols.append(COLORS.get(r["target"], "#888"))
    ax.barh(range(len(vals)), vals, color=cols)
    for y, v in enumerate(vals):
        ax.annotate(f"{v:.2f}", (v, y), ha="left", va="center", fontsize=7)
    ax.set_yticks(range(len(vals)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("p50 ms per look-up (client / server / request)")
    ax.set_title("prefix look-up of 512 keys (one round trip)")
    ax.grid(axis="x", alpha=0.3)

    ax = axes[2]
    mem = data.get("memory", {})
    labels, vals, cols = [], [], []
    for kind in ("redis", "kvd"):
        lg = mem.get(f"{kind}_large")
        sm = mem.get(f"{kind}_small")
        if lg:
            labels.append(f"{kind}\n1 MiB values\n(RSS/payload x100)")
            vals.append(100 * lg["ratio"])
            cols.append(COLORS[kind])
        if sm:
            labels.append(f"{kind}\nsmall keys\n(bytes/key)")
            vals.append(sm["bytes_per_key"])
            cols.append(COLORS[kind])
    ax.bar(range(len(vals)), vals, color=cols)
    for x, v in enumerate(vals):
        ax.annotate(f"{v:.0f}", (x, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(vals)), labels, fontsize=7)
    ax.set_title("memory (VmRSS above an empty server)")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=str(ROOT / "docs/bench/results.json"))
    ap.add_argument("--out", default=str(ROOT / "docs/bench"))
    args = ap.parse_args()
    try:
        _pyplot()
    except ImportError:
        print("plot_bench needs matplotlib, a bench-only dependency: .venv/bin/pip install matplotlib", file=sys.stderr)
        return 2
    data = json.loads(Path(args.json).read_text())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plot_values(data, out / "bench-values.png")
    plot_small(data, out / "bench-small.png")
    print(f"wrote {out / 'bench-values.png'} and {out / 'bench-small.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
