"""Failures of a real peer rank: a blocked next, reads and a barrier
interrupted by Ctrl-C, a read timing out on a stopped peer, a killed peer
(ConnectionError with .rank). Rank 1 is a child process (_peer.py); reads
go through libfabric (tcp on lo). Runs in the single-rank session only."""
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import ddstore
from ddstore.store import free_port
from ddstore import _lib
from conftest import clean_env, pattern

N0, N1 = 40, 30


def stop(proc, timeout=10.0):
    """Sends proc SIGSTOP and returns once every thread of it has stopped.
    kill() only queues the signal: until one of proc's threads takes it,
    the others (the progress thread) go on serving reads, and on a loaded
    machine a small read can complete in that window."""
    os.kill(proc.pid, signal.SIGSTOP)
    tasks = "/proc/%d/task" % proc.pid
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for tid in os.listdir(tasks):
            try:
                with open("%s/%s/stat" % (tasks, tid)) as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that ended
        if states and all(st in ("T", "t") for st in states):
            return
        if time.monotonic() > deadline:
            raise AssertionError("peer %d not stopped %.0f s after SIGSTOP: thread states %s" % (
                proc.pid, timeout, states))
        time.sleep(0.001)


# The two ranks are two nodes (node_mode="fabric"), so under the tree
# control plane rank 0's agent declares a stopped rank 1 dead after
# store.ctrl_dead_after (3.6 s by default). Tests that keep the peer
# stopped longer, to see what a read or Ctrl-C does meanwhile, give rank
# 0's ring a longer deadline in a config file of their own (the library's
# Go runtime read the environment when it was loaded).
LONG_RING = "store:\n  ctrl_dead_after: 120s\n"


@pytest.fixture
def pair(store, request, tmp_path):
    """Rank 0 here, rank 1 a child; request.param: options of rank 0's
    store, and "yaml": a config file's text, merged over the defaults."""
    if store.size > 1:
        pytest.skip("two-rank peer tests run in the single-rank session")
    port = free_port("127.0.0.1")
    job = "pypeer-%d" % os.getpid()
    here = os.path.dirname(os.path.abspath(__file__))
    child = subprocess.Popen([sys.executable, os.path.join(here, "_peer.py"), "127.0.0.1:%d" % port, job,
                              str(N0), str(N1)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=clean_env(), text=True)
    opts = dict({"fabric_timeout": 1.5}, **getattr(request, "param", {}))
    if "yaml" in opts:
        cfg = tmp_path / "ddstore.yaml"
        cfg.write_text(opts.pop("yaml"))
        opts["config"] = str(cfg)
    st = ddstore.DDStore(node_mode="fabric", iface="lo", telemetry=False, timeout=30, **opts,
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


# Ctrl-C must raise KeyboardInterrupt within 0.5 s (issue 14); asserted
# with room for a loaded 2-core machine, far below the waits that an
# unsliced call would block for (the fabric or collective timeout).
INTERRUPT_BOUND = 1.0


def in_library_wait(frame):
    """The main thread waits in the library for a started call (a call
    handle h in _lib._run): the call is under way."""
    return frame.f_code is _lib._run.__code__ and frame.f_locals.get("h")


def interrupt_after(fn, blocked=in_library_wait, delay=0.2):
    """Runs fn, which must block, and sends this process SIGINT once delay
    seconds have passed and the main thread's innermost frame satisfies
    blocked (so that a slow start on a loaded machine is not taken for
    an interrupted call); returns the seconds from the signal to
    KeyboardInterrupt. A call that ends by itself fails the test, and no
    SIGINT follows it (one already on its way is absorbed here, so that
    it cannot abort the whole run)."""
    main = threading.main_thread().ident
    sent = []
    lock = threading.Lock()
    ended = threading.Event()  # fn ended without the interrupt

    def interrupt():
        time.sleep(delay)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ended.is_set():
            f = sys._current_frames().get(main)
            if f is not None and blocked(f):
                break
            time.sleep(0.01)
        with lock:
            if ended.is_set():
                return
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupt)
    t.start()
    start = time.monotonic()
    outcome, ended_at, absorbed = None, 0.0, False
    try:
        try:
            fn()
            outcome = "returned"
        except Exception as e:  # noqa: BLE001 - reported below
            outcome = "raised %r" % (e,)
        ended_at = time.monotonic() - start
        with lock:
            ended.set()
        if sent:
            time.sleep(5)  # the signal sent before ended was set lands here
    except KeyboardInterrupt:
        if outcome is None:  # fn was interrupted, as it should be
            if not sent:
                raise  # a Ctrl-C from outside
            took = time.monotonic() - sent[0]
            t.join()
            return took
        absorbed = True
    t.join()
    pytest.fail("the call did not block until interrupted: it %s %.2f s after it started%s" % (
        outcome, ended_at, " (the interrupt came later and was absorbed)" if absorbed else ""))


# The fabric timeout leaves the interrupt seconds to arrive on a loaded
# machine before the blocked read fails by itself.
@pytest.mark.parametrize("pair", [{"fabric_timeout": 5, "yaml": LONG_RING}], indirect=True)
def test_keyboard_interrupt_during_blocked_next_and_timeout(pair):
    st, child = pair
    np.testing.assert_array_equal(st.get_batch("p", remote_rows()), pattern(remote_rows(), (64,), np.int64))
    ld = ddstore.Loader(st, ["p"], batch_size=4, workers=1, prefetch=1, sampler=lambda e: remote_rows(),
                        timeout=60)
    stop(child)  # the peer stops serving reads
    try:
        it = iter(ld)
        took = interrupt_after(lambda: next(it), lambda f: f.f_code.co_name == "__next__", 0.3)
        assert took < INTERRUPT_BOUND, "KeyboardInterrupt %.3f s after SIGINT" % took
        # a read of the stopped peer fails at the fabric timeout (5 s)
        t0 = time.monotonic()
        with pytest.raises(ddstore.DeadlineError) as e:
            st.get_batch("p", remote_rows())
        assert isinstance(e.value, TimeoutError) and 4.0 < time.monotonic() - t0 < 30
    finally:
        os.kill(child.pid, signal.SIGCONT)
    ld.close()


def wait_pending_done(timeout=20):
    deadline = time.monotonic() + timeout
    while _lib.pending():
        assert time.monotonic() < deadline, "interrupted calls still running %d s after the peer resumed" % timeout
        time.sleep(0.05)


@pytest.mark.parametrize("pair", [{"fabric_timeout": 30, "yaml": LONG_RING}], indirect=True)  # reads block until SIGCONT
def test_keyboard_interrupt_during_reads_and_barrier(pair):
    st, child = pair
    rows = remote_rows()
    want = pattern(rows, (64,), np.int64)
    np.testing.assert_array_equal(st.get_batch("p", rows), want)
    took = {}
    stop(child)  # the peer stops serving reads: every read of its rows blocks
    stopped = time.monotonic()
    try:
        lost = np.zeros((N1, 64), np.int64)
        lost_ref = weakref.ref(lost)
        took["get"] = interrupt_after(lambda: st.get("p", lost, N0))
        del lost  # only the interrupted read holds it now: it must stay alive
        gc.collect()
        assert lost_ref() is not None
        kept = np.zeros((N1, 64), np.int64)
        took["get_batch"] = interrupt_after(lambda: st.get_batch("p", rows, out=kept))
        took["get_ranges"] = interrupt_after(lambda: st.get_ranges("p", [N0 + 20, N0], [10, 20]))
        n = _lib.pending()
        assert n == 3, "%d of 3 interrupted reads still running %.2f s after the peer stopped (took %s)" % (
            n, time.monotonic() - stopped, took)
    finally:
        os.kill(child.pid, signal.SIGCONT)
    # the interrupted reads end once the peer serves again, into live buffers
    wait_pending_done()
    gc.collect()
    assert lost_ref() is None
    np.testing.assert_array_equal(kept, want)
    # a barrier the peer has not entered
    took["barrier"] = interrupt_after(st.barrier)
    child.stdin.write("barrier\n")  # meets the interrupted barrier
    child.stdin.flush()
    assert child.stdout.readline().strip() == "barrier"
    wait_pending_done()
    print("KeyboardInterrupt after SIGINT (s):", {k: round(v, 3) for k, v in took.items()})
    for what, t in took.items():
        assert t < INTERRUPT_BOUND, "%s: KeyboardInterrupt %.3f s after SIGINT" % (what, t)
    # the store is usable: collectives meet, every read is right
    child.stdin.write("barrier\n")
    child.stdin.flush()
    st.barrier()
    assert child.stdout.readline().strip() == "barrier"
    out = np.zeros((N0 + N1, 64), np.int64)
    st.get("p", out, 0)
    np.testing.assert_array_equal(out, pattern(np.arange(N0 + N1), (64,), np.int64))
    np.testing.assert_array_equal(st.get_batch("p", rows[::-1]), want[::-1])
    buf, off = st.get_ranges("p", [N0 + 20, N0 - 5], [10, 20])
    np.testing.assert_array_equal(buf, pattern(np.r_[N0 + 20:N0 + 30, N0 - 5:N0 + 15], (64,), np.int64))


@pytest.mark.parametrize("pair", [{"interruptible_reads": False}], indirect=True)
def test_reads_in_the_calling_thread(pair):
    st, child = pair
    rows = remote_rows()
    np.testing.assert_array_equal(st.get_batch("p", rows[::-1]), pattern(rows[::-1], (64,), np.int64))
    out = np.zeros((N1 + 10, 64), np.int64)
    st.get("p", out, N0 - 10)
    np.testing.assert_array_equal(out, pattern(np.arange(N0 - 10, N0 + N1), (64,), np.int64))
    buf, off = st.get_ranges("p", [N0 + 5, 3], [7, 4])
    np.testing.assert_array_equal(buf, pattern(np.r_[N0 + 5:N0 + 12, 3:7], (64,), np.int64))
    assert _lib.pending() == 0


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
