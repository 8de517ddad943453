#!/usr/bin/env python3
"""Table of medians (us per row) from a run.sh output folder.

usage: summarize.py OUTDIR
reads OUTDIR/peer-*.txt (PEER ... RESULT lines of bench.cxx) and OUTDIR/ours-*.txt
(go test -bench output with the us/row metric); prints markdown tables.
"""
import glob, os, re, statistics, sys

out = sys.argv[1] if len(sys.argv) > 1 else "bin/peer/out"
ROWS = [3072, 1048576]
peer = {}   # (label, rows_mode, row) -> [us_per_row]
peerp50 = {}
fails = []
for f in sorted(glob.glob(os.path.join(out, "peer-*.txt"))):
    for line in open(f):
        if not line.startswith("PEER"):
            continue
        kv = dict(re.findall(r"(\w+)=(\S+)", line))
        if "FAILED" in line:
            fails.append(line.strip())
            continue
        key = (kv["label"], kv["rows"], int(kv["row"]))
        peer.setdefault(key, []).append(float(kv["us_per_row"]))
        peerp50.setdefault(key, []).append(float(kv["p50_us"]))
        if "rss_growth_kb" in kv:
            peer.setdefault(key + ("rss",), []).append(
                float(kv["rss_growth_kb"]) / float(kv["calls"]) * 1024.0)

ours = {}   # (path, row, batch) -> [us/row]
for f in sorted(glob.glob(os.path.join(out, "ours-*.txt"))):
    for line in open(f):
        parts = line.split()
        if not parts or not parts[0].startswith("BenchmarkGet/"):
            continue
        m = re.match(r"BenchmarkGet/path=([\w-]+)/row=(\d+)/batch=(\d+)(?:-\d+)?$", parts[0])
        if not m:
            continue
        for i in range(1, len(parts) - 1):
            if parts[i + 1] == "us/row":
                ours.setdefault((m.group(1), int(m.group(2)), int(m.group(3))), []).append(float(parts[i]))


def cell(vals):
    if not vals:
        return "-"
    med = statistics.median(vals)
    fmt = (lambda x: f"{x:.3g}") if med < 10 else (lambda x: f"{x:.1f}") if med < 1000 else (lambda x: f"{x:.0f}")
    return f"{fmt(med)} ({fmt(min(vals))}–{fmt(max(vals))}, n={len(vals)})"


def med(vals):
    if not vals:
        return "-"
    m = statistics.median(vals)
    return f"{m:.3g}" if m < 10 else f"{m:.1f}" if m < 1000 else f"{m:.0f}"


table = [
    ("peer MPI_Get (method 0), single get", lambda r: peer.get(("mpi", "random", r))),
    ("peer fi_read tcp;ofi_rxm lo (method 1), single get", lambda r: peer.get(("tcp", "random", r))),
    ("peer fi_read shm (method 1, patched), single get", lambda r: peer.get(("shm", "random", r))),
    ("ours local, batch 1", lambda r: ours.get(("local", r, 1))),
    ("ours local, batch 128", lambda r: ours.get(("local", r, 128))),
    ("ours tcp (default = gather), batch 1", lambda r: ours.get(("tcp", r, 1))),
    ("ours tcp (default = gather), batch 128", lambda r: ours.get(("tcp", r, 128))),
    ("ours tcp-rma, batch 1", lambda r: ours.get(("tcp-rma", r, 1))),
    ("ours tcp-rma, batch 128", lambda r: ours.get(("tcp-rma", r, 128))),
    ("memcpy, batch 1", lambda r: ours.get(("memcpy", r, 1))),
    ("memcpy, batch 128", lambda r: ours.get(("memcpy", r, 128))),
]
print("## Medians, us per row (mean per call within a run; median over runs)\n")
print("| read | 3 KB (3072 B) | 1 MiB |")
print("|---|---:|---:|")
for name, f in table:
    print(f"| {name} | {med(f(3072))} | {med(f(1048576))} |")
print("\n## Same, with (min–max, n runs)\n")
print("| read | 3 KB (3072 B) | 1 MiB |")
print("|---|---:|---:|")
for name, f in table:
    print(f"| {name} | {cell(f(3072))} | {cell(f(1048576))} |")
print("\n## Peer, secondary figures\n")
print("| peer config | 3 KB | 1 MiB |")
print("|---|---:|---:|")
for lab in ("mpi", "tcp", "shm"):
    print(f"| {lab} random rows: per-call p50 us | {med(peerp50.get((lab, 'random', 3072)))} | {med(peerp50.get((lab, 'random', 1048576)))} |")
    print(f"| {lab} one fixed row (like ours batch 1): us/row | {cell(peer.get((lab, 'fixed', 3072)))} | {cell(peer.get((lab, 'fixed', 1048576)))} |")
    print(f"| {lab} random rows: rank-0 RSS growth, bytes per get | {med(peer.get((lab, 'random', 3072, 'rss')))} | {med(peer.get((lab, 'random', 1048576, 'rss')))} |")
if fails:
    print("\nFailed peer runs:")
    for l in fails:
        print("  " + l)
