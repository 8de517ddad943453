"""examples/torch: the data-parallel trainer gives the same loss to the last
digit across loader settings, read paths and launchers; the ragged-record
example checks every record. Runs in the single-rank session only (it
starts its own 4-rank jobs)."""
import json
import os
import re
import subprocess
import threading

import pytest

from conftest import clean_env

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRAIN = os.path.join(ROOT, "examples", "torch", "train.py")
RAGGED = os.path.join(ROOT, "examples", "torch", "ragged.py")
DDRUN = os.path.join(ROOT, "bin", "ddrun")


def run(launcher, script, *args):
    cmd = (["mpiexec.mpich", "-n", "4"] if launcher == "mpiexec" else [DDRUN, "-n", "4"]) + \
        ["/usr/bin/python3", script] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env(), cwd="/tmp")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_train_loss_identical_across_loaders_paths_launchers(single):
    variants = [("mpiexec", []), ("mpiexec", ["--workers", "0", "--per-sample"]),
                ("mpiexec", ["--workers", "3", "--prefetch", "4", "--node-mode", "fabric"])]
    if os.path.exists(DDRUN):
        variants.append(("ddrun", ["--workers", "2", "--prefetch", "1"]))
    losses = {}
    for launcher, args in variants:
        out = run(launcher, TRAIN, "--rows", "2048", "--epochs", "2", *args)
        m = re.search(r"final-loss (\S+)", out)
        assert m, out
        losses[(launcher,) + tuple(args)] = m.group(1)
    assert len(set(losses.values())) == 1, losses
    assert float(next(iter(losses.values()))) < 2.2  # it learns


def test_ragged_example(single):
    out = run("mpiexec", RAGGED, "--samples", "600", "--node-mode", "fabric")
    assert "ragged: 600 samples" in out


def test_train_visible_in_ddtop(single, tmp_path):
    ddtop = os.path.join(ROOT, "bin", "ddtop")
    if not os.path.exists(ddtop):
        subprocess.run(["go", "build", "-o", os.path.join(ROOT, "bin") + "/", "./cmd/ddtop"], cwd=ROOT, check=True,
                       env=dict(os.environ, PATH="/usr/local/go/bin:" + os.environ["PATH"]))
    env = dict(clean_env(), DDSTORE_TELEMETRY_DIR=str(tmp_path))
    p = subprocess.Popen(["mpiexec.mpich", "-n", "4", "/usr/bin/python3", TRAIN, "--rows", "1024", "--epochs", "1",
                          "--hold", "20"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         cwd="/tmp")
    # the trainer must reach its hold within 180 s; past it, it is killed and
    # the loop below ends instead of blocking on a silent pipe
    watchdog = threading.Timer(180, p.kill)
    watchdog.start()
    try:
        for line in p.stdout:
            if line.startswith("holding"):
                break
        else:
            pytest.fail("the trainer ended (or was killed after 180 s) before holding")
        watchdog.cancel()
        out = subprocess.run([ddtop, "--json", "--dir", str(tmp_path), "--window", "0"], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        snap = json.loads(out.stdout)
        ranks = sorted(r["rank"] for r in snap["ranks"])
        assert ranks == [0, 1, 2, 3], snap["ranks"]
        for r in snap["ranks"]:
            assert r["state"] == "live" and r["loader"]["batches"] == 1024 // 4 // 32, r
            assert {x["var"] for x in r["readers"]} >= {"img", "label"}, r["readers"]
    finally:
        watchdog.cancel()
        p.terminate()  # mpiexec forwards SIGTERM to the ranks
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
