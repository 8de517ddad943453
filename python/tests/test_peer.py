"""Failures of a real peer rank: a blocked next interrupted by Ctrl-C, a
read timing out on a stopped peer, a killed peer (ConnectionError with
.rank). Rank 1 is a child process (_peer.py); reads go through libfabric
(tcp on lo). Runs in the single-rank session only."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ddstore
from conftest import pattern

N0, N1 = 40, 30


@pytest.fixture
def pair(store):
    if store.size > 1:
        pytest.skip("two-rank peer tests run in the single-rank session")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    job = "pypeer-%d" % os.getpid()
    env = {k: v for k, v in os.environ.items()
           if not (k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DDSTORE_JOB", "LOCAL_RANK",
                         "LOCAL_WORLD_SIZE") or k.startswith(("PMI_", "SLURM_", "OMPI_")))}
    here = os.path.dirname(os.path.abspath(__file__))
    child = subprocess.Popen([sys.executable, os.path.join(here, "_peer.py"), "127.0.0.1:%d" % port, job,
                              str(N0), str(N1)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    st = ddstore.DDStore(node_mode="fabric", iface="lo", telemetry=False, timeout=30, fabric_timeout=1.5,
                         bootstrap={"method": "tcp", "addr": "127.0.0.1:%d" % port, "rank": 0, "world": 2,
                                    "job": job})
    st.add("p", pattern(np.arange(N0), (64,), np.int64))
    assert child.stdout.readline().strip() == "ready"
    yield st, child
    if child.poll() is None:
        os.kill(child.pid, signal.SIGCONT)
        child.stdin.write("close\n")
        child.stdin.flush()
    if not st.closed:
        try:
            st.close()
        except ddstore.Error:
            pass  # the peer is gone: the close barrier fails, resources are released
    child.wait(timeout=20)


def remote_rows():
    return np.arange(N0, N0 + N1)


def test_keyboard_interrupt_during_blocked_next_and_timeout(pair):
    st, child = pair
    np.testing.assert_array_equal(st.get_batch("p", remote_rows()), pattern(remote_rows(), (64,), np.int64))
    ld = ddstore.Loader(st, ["p"], batch_size=4, workers=1, prefetch=1, sampler=lambda e: remote_rows(),
                        timeout=60)
    os.kill(child.pid, signal.SIGSTOP)  # the peer stops serving reads
    try:
        it = iter(ld)
        sent = []

        def interrupt():
            time.sleep(0.3)
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

        t = threading.Thread(target=interrupt)
        t.start()
        with pytest.raises(KeyboardInterrupt):
            next(it)
        took = time.monotonic() - sent[0]
        t.join()
        assert took < 0.5, "KeyboardInterrupt %.3fs after SIGINT" % took
        # a read of the stopped peer fails at the fabric timeout (1.5 s)
        t0 = time.monotonic()
        with pytest.raises(ddstore.DeadlineError) as e:
            st.get_batch("p", remote_rows())
        assert isinstance(e.value, TimeoutError) and 1.0 < time.monotonic() - t0 < 10
    finally:
        os.kill(child.pid, signal.SIGCONT)
    ld.close()


def test_dead_peer_is_connection_error_with_rank(pair):
    st, child = pair
    np.testing.assert_array_equal(st.get_batch("p", [N0 + 1, 0]), pattern([N0 + 1, 0], (64,), np.int64))
    child.kill()
    child.wait()
    deadline = time.monotonic() + 10
    while True:
        try:
            st.get_batch("p", remote_rows())
        except ddstore.PeerDeadError as e:
            assert isinstance(e, ConnectionError) and e.rank == 1, (e, e.rank)
            break
        except ddstore.DeadlineError:
            pass  # the fabric timed out before the watcher saw the exit: try again
        assert time.monotonic() < deadline, "no PeerDeadError 10 s after the peer was killed"
        time.sleep(0.1)
    # local rows still read
    np.testing.assert_array_equal(st.get_batch("p", [0, N0 - 1]), pattern([0, N0 - 1], (64,), np.int64))
