"""The atexit hook: a job that never calls close() (as ORNL pyddstore
scripts do) exits 0 with its stores closed, each rank's telemetry segment
gone; a forked child's exit leaves the parent's store alone; a close that
fails at exit (a dead or a hung rank) is one line on stderr, never a
traceback or a hang. The jobs run _no_close.py; they are started here, so
these tests run in the single-rank session only."""
import os
import re
import signal
import subprocess
import sys

import pytest

from ddstore.store import free_port
from conftest import clean_env, local_rows

HERE = os.path.dirname(os.path.abspath(__file__))
NO_CLOSE = os.path.join(HERE, "_no_close.py")
DDRUN = os.path.join(HERE, "..", "..", "bin", "ddrun")
LAUNCHERS = {"mpiexec": ["mpiexec.mpich", "-n", "2"], "ddrun": [DDRUN, "-n", "2"]}
TIMEOUT = 120  # s for a whole job, far above what it takes on a loaded machine


def start(tel, *args, launcher=(), env=None):
    """_no_close.py (under launcher, with env added) with its telemetry
    segments in tel."""
    return subprocess.Popen(list(launcher) + [sys.executable, NO_CLOSE] + list(args), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd="/tmp",
                            env=dict(clean_env(), DDSTORE_TELEMETRY_DIR=str(tel), **(env or {})))


def finish(p):
    """(stdout lines, stderr) of p once it exited 0."""
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 0, out + err
    return out.splitlines(), err


def segments(lines):
    return sorted(line.split()[1] for line in lines if line.startswith("segment "))


def check_every_rank_read(lines, world):
    rows = sum(local_rows(r) for r in range(world))
    assert sorted(line for line in lines if " read " in line) == ["rank %d read %d rows" % (r, rows)
                                                                   for r in range(world)], lines


@pytest.mark.parametrize("drop", [False, True])
def test_exit_without_close_single_rank(single, tmp_path, drop):
    lines, err = finish(start(tmp_path, *(["--drop"] if drop else [])))
    check_every_rank_read(lines, 1)
    assert len(segments(lines)) == 1 and err == ""
    assert os.listdir(tmp_path) == []  # the hook closed the store: the segment is gone


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_exit_without_close_two_ranks(single, tmp_path, launcher):
    if launcher == "ddrun" and not os.path.exists(DDRUN):
        pytest.skip("bin/ddrun not built (make python-test builds it)")
    lines, err = finish(start(tmp_path, launcher=LAUNCHERS[launcher]))
    check_every_rank_read(lines, 2)
    assert len(segments(lines)) == 2 and "ddstore" not in err, err
    assert os.listdir(tmp_path) == []


def test_forked_child_exit_does_not_close_the_store(single, tmp_path):
    # the child exits the normal way (atexit hooks run); the parent then
    # finds its segment in place, reads every row and exits without close()
    lines, err = finish(start(tmp_path, "--fork"))
    check_every_rank_read(lines, 1)
    assert len(segments(lines)) == 1 and err == ""
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("peer,failure", [("crash", "(PeerDeadError|DeadlineError)"),
                                          ("hang", r"DeadlineError: .*rank 1 did not arrive within 10s")])
def test_failed_close_at_exit_is_one_line(single, tmp_path, peer, failure):
    # rank 1 leaves (or hangs) without closing: rank 0's close barrier at
    # exit fails, within the store's timeout (10 s)
    tcp = ["--timeout", "10", "--tcp", "127.0.0.1:%d" % free_port("127.0.0.1"), "fail-%s-%d" % (peer, os.getpid())]
    rank1 = start(tmp_path, *tcp, "1", "--" + peer)
    try:
        lines, err = finish(start(tmp_path, *tcp, "0"))
    finally:
        if peer == "hang":
            rank1.send_signal(signal.SIGKILL)
        rank1.communicate(timeout=TIMEOUT)
    assert sorted(line for line in lines if " read " in line) == ["rank 0 read %d rows" % (local_rows(0) +
                                                                                           local_rows(1))]
    assert len(err.splitlines()) == 1, err
    assert re.match(r"ddstore: closing the store \(rank 0 of 2\) at exit failed: %s" % failure, err), err
    # rank 0 released its store all the same; rank 1's segment is left over
    assert os.listdir(tmp_path) == [segments(lines)[0].replace("-0.tel", "-1.tel")]


@pytest.mark.parametrize("how", ["raise", "interrupt"])
def test_uncaught_exception_abandons_the_store(single, tmp_path, how):
    """A script that ends by an uncaught error or Ctrl-C: the hook removes
    its segment without a close barrier, and a Ctrl-C still ends the
    process by SIGINT (as the interpreter would), so that a launcher sees
    the interrupt."""
    p = start(tmp_path, "--" + how)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == (1 if how == "raise" else -signal.SIGINT), (p.returncode, out, err)
    assert ("RuntimeError" if how == "raise" else "KeyboardInterrupt") in err, err
    assert "ddstore:" not in err, err  # no close attempted, nothing failed
    assert len(segments(out.splitlines())) == 1
    assert os.listdir(tmp_path) == []


# What srun 22.05 gives its tasks: Ctrl-C twice to srun sends them SIGINT,
# then SIGKILL about 10 ms later (measured here).
SLURM_STEP = {"SLURM_JOB_ID": "15", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0"}
ABANDONED = "store abandoned (segment and shard files removed), ending by %s now"


@pytest.mark.parametrize("env,how,sig,line", [
    (SLURM_STEP, "interrupt", signal.SIGINT,
     "ddstore: rank 0 of 1: Ctrl-C in a Slurm step (srun SIGKILLs it right after): " + ABANDONED % "SIGINT"),
    ({}, "term", signal.SIGTERM, "ddstore: rank 0 of 1: SIGTERM: " + ABANDONED % "SIGTERM"),
    (SLURM_STEP, "term", signal.SIGTERM, "ddstore: rank 0 of 1: SIGTERM: " + ABANDONED % "SIGTERM"),
])
def test_signal_ends_the_process_at_once(single, tmp_path, env, how, sig, line):
    """SIGINT in a Slurm step (no time for a KeyboardInterrupt before srun's
    SIGKILL) and SIGTERM anywhere (Python's default would leave the
    segment): the library abandons the store, says so in one line and ends
    the process by the signal, with no traceback."""
    p = start(tmp_path, "--" + how, env=env)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == -sig, (p.returncode, out, err)
    assert err.splitlines() == [line], err
    assert len(segments(out.splitlines())) == 1
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("env", [dict(SLURM_STEP, SLURM_DISABLE_STATUS="1"), dict(SLURM_STEP, SLURM_PTY_PORT="4547")])
def test_ctrl_c_raises_where_srun_gives_time(single, tmp_path, env):
    """srun with SLURM_DISABLE_STATUS forwards one Ctrl-C alone, and under
    srun --pty Ctrl-C comes through the task's terminal: no SIGKILL
    follows, so Ctrl-C raises KeyboardInterrupt as anywhere else."""
    p = start(tmp_path, "--interrupt", env=env)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == -signal.SIGINT, (p.returncode, out, err)
    assert "KeyboardInterrupt" in err and "ddstore:" not in err, err
    assert os.listdir(tmp_path) == []


def test_a_sigterm_handler_of_the_program_wins(single, tmp_path):
    p = start(tmp_path, "--own-term", env=SLURM_STEP)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 7 and err == "", (p.returncode, out, err)
    assert os.listdir(tmp_path) == []  # closed by the exit hook


def test_forked_child_ends_by_sigterm(single, tmp_path):
    """A forked child (a DataLoader worker) has the library's handler but
    not its threads: it gets Python's own SIGTERM back, ends by it and
    leaves the parent's store alone."""
    lines, err = finish(start(tmp_path, "--fork-term", env=SLURM_STEP))
    check_every_rank_read(lines, 1)
    assert err == ""
    assert os.listdir(tmp_path) == []
