"""Rank 1 of a two-rank store that the tests control: it adds the same
variable as rank 0 of the test, then follows commands on stdin: "barrier"
(answers "barrier" once it returned) and "close"."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import numpy as np  # noqa: E402
import ddstore  # noqa: E402
from conftest import pattern  # noqa: E402

addr, job, n0, n1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = ddstore.DDStore(node_mode="fabric", iface="lo", telemetry=False, timeout=30, fabric_timeout=1.5,
                    bootstrap={"method": "tcp", "addr": addr, "rank": 1, "world": 2, "job": job})
s.add("p", pattern(np.arange(n0, n0 + n1), (64,), np.int64))
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "barrier":
        s.barrier()
        print("barrier", flush=True)
    elif line.strip() == "close":
        s.close()
        break
