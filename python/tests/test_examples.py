"""examples/torch: the data-parallel trainer gives the same loss to the last
digit across loader settings, read paths and launchers; the ragged-record
example checks every record. Runs in the single-rank session only (it
starts its own 4-rank jobs)."""
import os
import re
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TRAIN = os.path.join(ROOT, "examples", "torch", "train.py")
RAGGED = os.path.join(ROOT, "examples", "torch", "ragged.py")
DDRUN = os.path.join(ROOT, "bin", "ddrun")


def clean_env():
    return {k: v for k, v in os.environ.items()
            if not (k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDSTORE_JOB", "LOCAL_RANK",
                          "LOCAL_WORLD_SIZE") or k.startswith(("PMI_", "SLURM_", "OMPI_", "HYDRA_")))}


def run(launcher, script, *args):
    cmd = (["mpiexec", "-n", "4"] if launcher == "mpiexec" else [DDRUN, "-n", "4"]) + \
        ["/usr/bin/python3", script] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=clean_env(), cwd="/tmp")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture
def single(store):
    if store.size > 1:
        pytest.skip("starts its own 4-rank jobs: single-rank session only")


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
