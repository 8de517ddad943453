#!/usr/bin/env python3
"""Medians and ratios of prebuilt.sh's figures.txt (lines "LABEL us_per_row")."""
import statistics
import sys

v = {}
for line in open(sys.argv[1]):
    k, x = line.split()
    if x != "FAILED":
        v.setdefault(k, []).append(float(x))
m = {k: statistics.median(x) for k, x in v.items()}
order = ["peer", "peer-fixed", "ours", "fabric", "ours-spin", "fabric-spin", "base"]
for k in order + sorted(set(v) - set(order)):
    if k in v:
        print(f"{k:12s} median {m[k]:7.2f} µs/row (min {min(v[k]):.2f}, max {max(v[k]):.2f}, n={len(v[k])})")


def ratio(a, b, what):
    if a in m and b in m:
        print(f"{a + ' ÷ ' + b:26s} {m[a] / m[b]:.3f}  {what}")


print("ratios of medians:")
ratio("ours", "peer", "default vs default (the issue's figure)")
ratio("ours-spin", "peer", "like with like: both targets spin, both readers spin")
ratio("ours", "peer-fixed", "default vs default, same row every call on both")
ratio("ours-spin", "peer-fixed", "like with like, same row every call on both")
ratio("fabric", "peer", "fabric.Reader alone (no engine), default target")
ratio("fabric-spin", "peer", "fabric.Reader alone, spinning target")
ratio("ours", "fabric", "the engine's cost over fabric's own read")
ratio("ours-spin", "fabric-spin", "the same, spinning target")
if "ours" in v and "base" in v and len(v["ours"]) == len(v["base"]):  # one of each per round
    q = sorted(o / b for o, b in zip(v["ours"], v["base"]))
    print(f"{'ours ÷ base per round':26s} {statistics.median(q):.3f}  median (all: {' '.join(f'{x:.3f}' for x in q)})")
