"""DDStore: every method on real ranks, every value checked against the
pattern of its global row."""
import os
import time

import numpy as np
import pytest
import torch

import ddstore
from ddstore.store import free_port
from conftest import world_comm, add_pattern, local_rows, pattern

DTYPES = ["int32", "int64", "uint8", "float32", "float64", "bool"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_get_every_dtype(store, dtype):
    name = "v-" + dtype
    shape = (3, 4)
    n = add_pattern(store, name, shape, dtype)
    info = store.query(name)
    assert info["global_rows"] == n and info["dtype"] == dtype and info["row_elems"] == 12
    assert info["shards"] == list(np.cumsum([0] + [local_rows(r) for r in range(store.width)]))
    # get: pyddstore's (name, out, start), ranges across every shard boundary
    for b in info["shards"][1:-1]:
        out = np.zeros((9,) + shape, dtype=dtype)
        assert store.get(name, out, b - 4) is out
        np.testing.assert_array_equal(out, pattern(np.arange(b - 4, b + 5), shape, dtype))
    out = np.zeros((n,) + shape, dtype=dtype)
    store.get(name, out)  # start defaults to 0: the whole variable
    np.testing.assert_array_equal(out, pattern(np.arange(n), shape, dtype))
    # a torch tensor works as out too
    t = torch.zeros((2,) + shape, dtype=getattr(torch, dtype))
    store.get(name, t, n - 2)
    np.testing.assert_array_equal(t.numpy(), pattern([n - 2, n - 1], shape, dtype))
    # get_batch: random order, duplicates, allocated or given out
    rng = np.random.default_rng(store.rank)
    idx = rng.integers(0, n, 50)
    idx[3] = idx[4]
    got = store.get_batch(name, idx)
    assert got.shape == (50,) + shape and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, pattern(idx, shape, dtype))
    buf = np.empty((50,) + shape, dtype=dtype)
    assert store.get_batch(name, list(idx), out=buf) is buf
    np.testing.assert_array_equal(buf, pattern(idx, shape, dtype))
    store.free(name)
    with pytest.raises(KeyError):
        store.query(name)


def test_init_update_pyddstore(store):
    # pyddstore: init(name, nrows, disp, itemsize) untyped; update(name, arr, offset) local rows
    rank, width = store.rank % store.width, store.width
    n_local, disp = local_rows(rank), 5
    first = sum(local_rows(r) for r in range(rank))
    store.init("raw", n_local, disp, itemsize=8)
    mine = pattern(np.arange(first, first + n_local), (disp,), np.float64)
    store.update("raw", mine[:10], 0)
    store.update("raw", mine[10:], 10)
    store.barrier()
    n = sum(local_rows(r) for r in range(width))
    assert store.query("raw")["global_rows"] == n
    out = np.zeros((n, disp), dtype=np.float64)
    store.epoch_begin()
    store.get("raw", out, 0)
    store.epoch_end()
    np.testing.assert_array_equal(out, pattern(np.arange(n), (disp,), np.float64))
    # any dtype of the same item size reads the raw items (pyddstore's rule)
    as_int = np.zeros((n, disp), dtype=np.int64)
    store.get("raw", as_int, 0)
    np.testing.assert_array_equal(as_int.view(np.float64), out)
    with pytest.raises(TypeError):
        store.get("raw", np.zeros((n, disp), dtype=np.float32), 0)
    # typed init
    store.init("typed", n_local, 3, dtype="int32")
    store.update("typed", pattern(np.arange(first, first + n_local), (3,), np.int32), 0)
    store.barrier()
    np.testing.assert_array_equal(store.get_batch("typed", [n - 1, 0]), pattern([n - 1, 0], (3,), np.int32))
    with pytest.raises(TypeError):
        store.update("typed", np.zeros((1, 3), dtype=np.int64), 0)
    with pytest.raises(IndexError):
        store.update("typed", np.zeros((2, 3), dtype=np.int32), n_local - 1)
    store.free("raw")
    store.free("typed")


def packed_records(n_rec, seed):
    """Record lengths 1–16 KB, the same on every rank (seeded)."""
    return np.random.default_rng(seed).integers(1 << 10, 16 << 10, n_rec)


def byte_pattern(g):
    g = np.asarray(g, dtype=np.int64)
    return ((g * 2654435761) >> 7).astype(np.uint8)


def test_get_ranges_ragged_across_shards(store):
    # HydraGNN-style: every rank packs its records into one uint8 array.
    rank, width = store.rank % store.width, store.width
    lens = packed_records(40 * width, 11)
    per = np.array_split(np.arange(len(lens)), width)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    lo = starts[per[rank][0]]
    hi = starts[per[rank][-1]] + lens[per[rank][-1]]
    store.add("records", byte_pattern(np.arange(lo, hi)))
    total = int(lens.sum())
    info = store.query("records")
    assert info["global_rows"] == total and info["row_bytes"] == 1
    rng = np.random.default_rng(rank + 5)
    pick = rng.integers(0, len(lens), 128)
    buf, off = store.get_ranges("records", starts[pick], lens[pick])
    assert buf.dtype == np.uint8 and off[0] == 0 and off[-1] == lens[pick].sum() == len(buf)
    for i, r in enumerate(pick):
        np.testing.assert_array_equal(buf[off[i]:off[i + 1]], byte_pattern(np.arange(starts[r], starts[r] + lens[r])))
    # ranges that straddle every shard boundary, and empty ones
    b = np.array(info["shards"][1:-1], dtype=np.int64)
    st = np.concatenate([b - 100, [0, total - 1]])
    ln = np.concatenate([np.full(len(b), 300), [0, 1]])
    buf, off = store.get_ranges("records", st, ln)
    for i in range(len(st)):
        np.testing.assert_array_equal(buf[off[i]:off[i + 1]], byte_pattern(np.arange(st[i], st[i] + ln[i])))
    # rows wider than a byte
    n = add_pattern(store, "wide", (6,), "float32")
    buf, off = store.get_ranges("wide", [n - 3, 0, 5], [3, 2, 0])
    assert buf.shape == (5, 6) and list(off) == [0, 3, 5, 5]
    np.testing.assert_array_equal(buf, pattern([n - 3, n - 2, n - 1, 0, 1], (6,), np.float32))
    # bad ranges
    with pytest.raises(IndexError) as e:
        store.get_ranges("records", [0, total - 5], [1, 6])
    assert isinstance(e.value, ddstore.Error) and "range 1 of 2" in str(e.value)
    with pytest.raises(IndexError):
        store.get_ranges("records", [-1], [1])
    with pytest.raises(IndexError):
        store.get_ranges("records", [0], [-1])
    with pytest.raises(ValueError):
        store.get_ranges("records", [0, 1], [1])
    with pytest.raises(ValueError):
        store.get_ranges("records", [0], [10], out=np.zeros(5, np.uint8))
    store.free("records")
    store.free("wide")


def test_errors_every_class(store):
    n = add_pattern(store, "e", (2,), "int32")
    out = np.zeros((4, 2), np.int32)
    cases = [
        (lambda: store.get("e", out, n - 3), ddstore.OutOfRangeError, IndexError),
        (lambda: store.get_batch("e", [0, n]), ddstore.OutOfRangeError, IndexError),
        (lambda: store.get_batch("e", [-1]), ddstore.OutOfRangeError, IndexError),
        (lambda: store.get("nope", out), ddstore.UnknownVariableError, KeyError),
        (lambda: store.query("nope"), ddstore.UnknownVariableError, KeyError),
        (lambda: store.get_batch("e", [0, 1], out=np.zeros((1, 2), np.int32)), ddstore.ShortBufferError, ValueError),
        (lambda: store.get("e", np.zeros((4, 2), np.float32)), ddstore.DTypeError, TypeError),
        (lambda: store.get("e", np.zeros((4, 3), np.int32)), ddstore.DTypeError, TypeError),
        (lambda: store.add("c", np.zeros((2, 2), np.complex64)), ddstore.DTypeError, TypeError),
        (lambda: store.get("e", np.zeros((4, 2), np.int32)[:, :1]), ddstore.Error, ValueError),
        (lambda: ddstore.Loader(store, ["e"], 0), ddstore.InvalidError, ValueError),
        (lambda: ddstore.DDStore(bogus=1), ddstore.InvalidError, ValueError),
    ]
    for fn, cls, builtin in cases:
        with pytest.raises(cls) as e:
            fn()
        assert isinstance(e.value, builtin) and isinstance(e.value, ddstore.Error), (cls, e.value)
        assert str(e.value).startswith("ddstore"), str(e.value)
    # an unknown variable: named, with the variables the store has
    with pytest.raises(ddstore.UnknownVariableError) as e:
        store.query("nope")
    assert 'variable "nope": no such variable; the store has [' in str(e.value) and '"e"' in str(e.value), str(e.value)
    # collectives: every rank gets the same error
    with pytest.raises(ddstore.ExistsError):
        store.add("e", np.zeros((1, 2), np.int32))
    dt = np.float32 if store.rank == 0 and store.size > 1 else np.int32
    if store.size > 1:
        with pytest.raises(ddstore.MismatchError) as e:
            store.add("m", np.zeros((1, 2), dt))
        assert isinstance(e.value, ValueError) and "dtype" in str(e.value)
    store.free("e")
    with pytest.raises(KeyError):
        store.get("e", out)


def test_close_twice_and_use_after_close():
    # a store of its own (single rank over the launcher's ranks: every rank opens one)
    s = ddstore.DDStore(bootstrap={"method": "single", "world": 1, "rank": 0}, telemetry=False)
    s.add("x", np.arange(10, dtype=np.int64))
    with s:
        assert s.get_batch("x", [9])[0] == 9
    assert s.closed
    for fn in (s.close, lambda: s.get_batch("x", [0]), lambda: s.add("y", np.zeros(2)), s.barrier,
               lambda: s.query("x"), lambda: ddstore.Loader(s, ["x"], 2)):
        with pytest.raises(ddstore.ClosedError) as e:
            fn()
        assert isinstance(e.value, ValueError)


def test_free_all_and_barrier(store):
    add_pattern(store, "f1", (1,), "int64")
    add_pattern(store, "f2", (1,), "int64")
    store.barrier()
    store.free()  # pyddstore's free(): every variable
    for v in ("f1", "f2"):
        with pytest.raises(KeyError):
            store.query(v)
    assert ddstore.PyDDStore is ddstore.DDStore


def test_mpi4py_world(store):
    """Under mpirun.openmpi the session store met over mpi4py's real
    MPI.COMM_WORLD: same ranks, and every rank's rows read by every rank
    match the pattern row by row, and MPI's allreduce agrees with the sum."""
    comm = world_comm()
    if comm is None:
        pytest.skip("not under mpirun.openmpi: the session store uses the launcher's environment")
    assert (store.rank, store.size) == (comm.Get_rank(), comm.Get_size()) and store.size > 1
    n = add_pattern(store, "w", (1,), "int64")
    rows = store.get_batch("w", np.arange(n))
    np.testing.assert_array_equal(rows, pattern(np.arange(n), (1,), np.int64))
    assert comm.allreduce(int(rows.sum())) == store.size * int(pattern(np.arange(n), (1,), np.int64).sum())
    store.free("w")


class OneRankComm:
    """The part of an mpi4py communicator DDStore uses: one rank (the
    real MPI.COMM_WORLD is tested under mpirun.openmpi)."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def bcast(self, obj, root=0):
        return obj


def test_comm_bootstrap():
    with ddstore.PyDDStore(OneRankComm(), method=1, telemetry=False) as s:
        assert (s.rank, s.size) == (0, 1)
        s.add("c", pattern(np.arange(20), (3,), np.int64))
        np.testing.assert_array_equal(s.get_batch("c", [19, 2]), pattern([19, 2], (3,), np.int64))


@pytest.mark.parametrize("rank,missing", [(0, 1), (1, 0)])
def test_bootstrap_timeout_is_timeout_error(rank, missing):
    # a two-rank tcp rendezvous whose other rank never comes, with a short
    # bootstrap deadline of its own
    t0 = time.monotonic()
    with pytest.raises(ddstore.DeadlineError) as e:
        ddstore.DDStore(telemetry=False, bootstrap={"method": "tcp", "addr": "127.0.0.1:%d" % free_port("127.0.0.1"),
                                                    "rank": rank, "world": 2, "job": "never-%d" % os.getpid(),
                                                    "timeout": 1.5})
    took = time.monotonic() - t0
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, ddstore.Error)
    assert e.value.rank == missing and "rank %d" % missing in str(e.value), str(e.value)
    assert 1.0 < took < 30, took  # the bootstrap's deadline, not the default 60 s


def test_second_store_on_the_same_rendezvous(store):
    if store.size == 1:
        # no launcher: single-rank stores need no rendezvous, a second one works
        with ddstore.DDStore(telemetry=False) as s:
            s.add("two", pattern(np.arange(15), (2,), np.int32))
            np.testing.assert_array_equal(s.get_batch("two", [14, 3]), pattern([14, 3], (2,), np.int32))
        return
    comm = world_comm()
    if comm is not None:
        # the session store met over mpi4py (tcp at rank 0's address): the
        # launcher's own rendezvous (Open MPI: the node's session
        # directory) is free, and a second store over the communicator
        # gets an address of its own
        for second in (lambda: ddstore.DDStore(telemetry=False), lambda: ddstore.DDStore(comm, telemetry=False)):
            with second() as s:
                assert (s.rank, s.size) == (comm.Get_rank(), comm.Get_size())
                n = add_pattern(s, "two", (2,), "int32")
                idx = [n - 1, 0, (7 * s.rank + 3) % n]
                np.testing.assert_array_equal(s.get_batch("two", idx), pattern(idx, (2,), np.int32))
                s.barrier()
        return
    # the launcher's rendezvous (ddrun: tcp; mpiexec: PMI) is the session store's
    t0 = time.monotonic()
    with pytest.raises(ddstore.InvalidError) as e:
        ddstore.DDStore(telemetry=False, timeout=60)
    assert isinstance(e.value, ValueError) and time.monotonic() - t0 < 10
    msg = str(e.value)
    assert "rendezvous of its own" in msg and ("PMI" in msg or "still open holds the tcp rendezvous" in msg), msg
    # and the session store is unharmed
    n = add_pattern(store, "after2", (3,), "int64")
    np.testing.assert_array_equal(store.get_batch("after2", [n - 1, 0]), pattern([n - 1, 0], (3,), np.int64))
    store.free("after2")


def test_import_leaves_torch_until_loader():
    """import ddstore does not import torch (a second per process, four on
    2 cores for 4 ranks); ddstore.Loader does, and is the torch Dataset."""
    import subprocess
    import sys
    code = ("import sys, ddstore\n"
            "assert 'torch' not in sys.modules, 'torch imported by import ddstore'\n"
            "from ddstore import Loader, Batch\n"
            "import torch\n"
            "assert issubclass(Loader, torch.utils.data.IterableDataset)\n"
            "assert Batch.__module__ == 'ddstore.loader'\n"
            "try:\n"
            "    ddstore.Nope\n"
            "except AttributeError as e:\n"
            "    assert 'Nope' in str(e)\n"
            "else:\n"
            "    raise SystemExit('ddstore.Nope did not raise')\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(ddstore.__path__[0])))
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr
