"""Errors that Python raises: each message by its text, each code the
library's code of the exception's kind; dtype mismatches name both
dtypes; indices, starts, lengths and a start must be integers (floats,
even whole, bools and strings are refused), while integers of any width
read the right rows."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ddstore
from ddstore import errors
from ddstore.store import integers
from conftest import add_pattern, clean_env, library_codes, pattern

ROW = (2,)


@pytest.fixture(scope="module")
def f(store):
    """Variable "f": float32 rows of 2; yields its global rows."""
    n = add_pattern(store, "f", ROW, "float32")
    yield n
    store.free("f")


def raised(fn):
    with pytest.raises(ddstore.Error) as e:
        fn()
    return e.value


def check(fn, cls, msg):
    e = raised(fn)
    assert type(e) is cls, (type(e), e)
    assert str(e) == msg
    assert e.code == library_codes()[cls.kind], (cls, e.code)


F32 = "variable 'f' has dtype float32"


@pytest.mark.parametrize("call,msg", [
    (lambda s: s.get("f", np.zeros((2, 2))), "ddstore: get 'f': out has dtype float64, " + F32),
    (lambda s: s.get("f", torch.zeros((2, 2), dtype=torch.int32)), "ddstore: get 'f': out has dtype int32, " + F32),
    (lambda s: s.get_batch("f", [0], out=np.zeros((1, 2), np.float64)),
     "ddstore: get_batch 'f': out has dtype float64, " + F32),
    (lambda s: s.get_ranges("f", [0], [2], out=np.zeros((2, 2), np.int64)),
     "ddstore: get_ranges 'f': out has dtype int64, " + F32),
    (lambda s: s.update("f", np.zeros((1, 2), np.float64)), "ddstore: update 'f': arr has dtype float64, " + F32),
    (lambda s: s.get("f", np.zeros((2, 3), np.float32)), "ddstore: get 'f': out rows are 12 bytes, variable rows 8 bytes"),
    (lambda s: s.add("c", np.zeros((2, 2), np.complex64)),
     "ddstore: dtype complex64 is not one of int32, int64, uint8, float32, float64, bool"),
    (lambda s: s.get("f", [0.0, 0.0]), "ddstore: want a numpy array or a torch tensor, got list"),
    (lambda s: ddstore.Loader(s, ["f"], 2, shapes={"f": (3,)}),
     "ddstore: Loader: shape (3,) of 'f' holds 12 bytes, rows are 8 bytes"),
])
def test_dtype_messages_name_both_dtypes(store, f, call, msg):
    check(lambda: call(store), ddstore.DTypeError, msg)


def test_raw_items_messages(store):
    store.init("raw", 3, 2, itemsize=8)
    try:
        check(lambda: store.get("raw", np.zeros((1, 2), np.float32)), ddstore.DTypeError,
              "ddstore: get 'raw': out has dtype float32 (items of 4 bytes), variable 'raw' has raw items of 8 bytes")
    finally:
        store.free("raw")


@pytest.mark.parametrize("call,msg", [
    (lambda s: s.get_batch("f", [1.7]), "ddstore: get_batch 'f': indices must be integers, not float (1.7 at position 0)"),
    (lambda s: s.get_batch("f", (0, 2.0)), "ddstore: get_batch 'f': indices must be integers, not float (2.0 at position 1)"),
    (lambda s: s.get_batch("f", 1.0), "ddstore: get_batch 'f': indices must be integers, not float (1.0)"),
    (lambda s: s.get_batch("f", np.array([2.0])),
     "ddstore: get_batch 'f': indices must be integers, not ndarray with dtype float64"),
    (lambda s: s.get_batch("f", torch.tensor([1.0, 2.0])),
     "ddstore: get_batch 'f': indices must be integers, not Tensor with dtype float32"),
    (lambda s: s.get_batch("f", np.array([False, True])),
     "ddstore: get_batch 'f': indices must be integers, not ndarray with dtype bool "
     "(a mask? np.flatnonzero(mask) gives its rows)"),
    (lambda s: s.get_batch("f", [True]), "ddstore: get_batch 'f': indices must be integers, not bool (True at position 0)"),
    (lambda s: s.get_batch("f", [3, True]),  # numpy would make this int64 [3, 1]
     "ddstore: get_batch 'f': indices must be integers, not bool (True at position 1)"),
    (lambda s: s.get_batch("f", [0, np.True_]),
     "ddstore: get_batch 'f': indices must be integers, not bool_ (True at position 1)"),
    (lambda s: s.get_batch("f", ["1"]), "ddstore: get_batch 'f': indices must be integers, not str ('1' at position 0)"),
    (lambda s: s.get_batch("f", "1"), "ddstore: get_batch 'f': indices must be integers, not str ('1')"),
    (lambda s: s.get("f", np.zeros((1, 2), np.float32), 2.0), "ddstore: get 'f': start must be an integer, not float (2.0)"),
    (lambda s: s.get("f", np.zeros((1, 2), np.float32), True), "ddstore: get 'f': start must be an integer, not bool (True)"),
    (lambda s: s.get("f", np.zeros((1, 2), np.float32), "3"), "ddstore: get 'f': start must be an integer, not str ('3')"),
    (lambda s: s.get_ranges("f", [0.5], [1]), "ddstore: get_ranges 'f': starts must be integers, not float (0.5 at position 0)"),
    (lambda s: s.get_ranges("f", [0], np.array([1.0])),
     "ddstore: get_ranges 'f': lengths must be integers, not ndarray with dtype float64"),
    (lambda s: s.update("f", np.zeros((1, 2), np.float32), 1.0),
     "ddstore: update 'f': offset must be an integer, not float (1.0)"),
])
def test_non_integer_indices_are_refused(store, f, call, msg):
    check(lambda: call(store), ddstore.DTypeError, msg)
    assert isinstance(raised(lambda: call(store)), TypeError)


def test_loader_sampler_indices_must_be_integers(store, f):
    with ddstore.Loader(store, ["f"], 2, sampler=lambda epoch: [0, 1.5]) as ld:
        check(lambda: iter(ld), ddstore.DTypeError,
              "ddstore: Loader: sampler's indices must be integers, not float (1.5 at position 1)")
    # integers of any kind (a generator, a tensor) read their rows
    for sampler in (lambda e: (i for i in [3, 0, 1]), lambda e: torch.tensor([3, 0, 1], dtype=torch.int32)):
        with ddstore.Loader(store, ["f"], 2, sampler=sampler) as ld:
            for b in ld:
                np.testing.assert_array_equal(b["f"].numpy(), pattern(b["index"].numpy(), ROW, np.float32))
            assert ld.last_stats[3] == 3


@pytest.mark.parametrize("indices", [
    [4, 0, 4], (4, 0, 4), np.array([4, 0, 4], np.int8), np.array([4, 0, 4], np.int16), np.array([4, 0, 4], np.uint16),
    np.array([4, 0, 4], np.int32), np.array([4, 0, 4], np.uint64), [np.int64(4), np.int32(0), 4],
    torch.tensor([4, 0, 4]), torch.tensor([4, 0, 4], dtype=torch.int32), np.array([[4, 0], [4, 4]])[:, 0].copy(),
])
def test_integer_indices_of_any_width_read_their_rows(store, f, indices):
    got = store.get_batch("f", indices)
    rows = np.asarray(indices).reshape(-1).astype(np.int64)
    np.testing.assert_array_equal(got, pattern(rows, ROW, np.float32))
    buf, off = store.get_ranges("f", indices, np.ones(len(rows), np.int8))
    np.testing.assert_array_equal(buf, pattern(rows, ROW, np.float32))
    for start in (rows[0], int(rows[0]), np.int16(rows[0]), torch.tensor(int(rows[0]))):
        out = np.zeros((3,) + ROW, np.float32)
        store.get("f", out, start)
        np.testing.assert_array_equal(out, pattern(np.arange(4, 7), ROW, np.float32))
    assert store.get_batch("f", []).shape == (0,) + ROW


def test_int64_indices_are_not_copied():
    a = np.arange(10, dtype=np.int64)
    for given, at in ((a, a.ctypes.data), (a[2:], a.ctypes.data + 16), (a.reshape(2, 5), a.ctypes.data)):
        assert integers(given, "x").ctypes.data == at
    t = torch.arange(10)
    assert integers(t, "x").ctypes.data == t.data_ptr()
    assert integers(a.astype(np.int32), "x").dtype == np.int64


@pytest.mark.parametrize("call,cls,msg", [
    (lambda s: ddstore.DDStore(bogus=1), ddstore.InvalidError, "ddstore: unknown option 'bogus'"),
    (lambda s: s.get("f", np.zeros((4, 2), np.float32)[:, :1]), ddstore.InvalidError,
     "ddstore: get 'f': out must be a writable C-contiguous array"),
    (lambda s: s.get_ranges("f", [0, 1], [1]), ddstore.InvalidError, "ddstore: get_ranges 'f': 2 starts and 1 lengths"),
    (lambda s: s.get_batch("f", [0, 1], out=np.zeros((1, 2), np.float32)), ddstore.ShortBufferError,
     "ddstore: get_batch 'f': 2 rows of 8 bytes need 16 bytes, out has 8"),
    (lambda s: s.get_ranges("f", [0], [-1]), ddstore.OutOfRangeError, "ddstore: get_ranges 'f': record 0 has length -1"),
])
def test_other_python_errors(store, f, call, cls, msg):
    check(lambda: call(store), cls, msg)


def test_closed_errors():
    s = ddstore.DDStore(bootstrap={"method": "single", "world": 1, "rank": 0}, telemetry=False)
    s.add("x", np.arange(6, dtype=np.int64))
    ld = ddstore.Loader(s, ["x"], 2)
    it = iter(ld)
    iter(ld)  # supersedes it
    check(lambda: next(it), ddstore.ClosedError, "ddstore: Loader epoch iterator superseded by a newer one")
    s.close()  # closes its loaders first
    check(lambda: iter(ld), ddstore.ClosedError, "ddstore: Loader closed")
    check(lambda: s.get_batch("x", [0]), ddstore.ClosedError, "ddstore: store closed")


def test_error_codes_come_from_the_library():
    """Each exception's code is the one the library gives its kind (Go's
    fault.Classes), and the library names no kind Python lacks; ForkError
    carries INVALID's code, yet the library's INVALID stays InvalidError."""
    codes = library_codes()
    assert codes.pop("OTHER") == 99 and ddstore._lib.lib().dds_error_name(12345) is None
    mapped = {c.kind: c for c in ddstore.Error.__subclasses__() if c.kind and not c.python_only}
    assert set(codes) == set(mapped), (codes, mapped)
    for kind, code in codes.items():
        e = errors.from_code(code, -1, "ddstore: x")
        assert type(e) is mapped[kind] and e.code == code
    assert ddstore.ForkError.kind == "INVALID" and ddstore.ForkError.python_only
    fork = errors.make(ddstore.ForkError, "ddstore: x")
    assert fork.code == codes["INVALID"] and isinstance(fork, RuntimeError) and not isinstance(fork, ValueError)


def test_code_of_a_python_error_before_the_library_is_loaded():
    # a fresh process whose first call fails in Python: make loads the library to learn the code
    prog = ("import sys; sys.path.insert(0, %r); import ddstore\n"
            "try:\n    ddstore.DDStore(bogus=1)\nexcept ddstore.InvalidError as e:\n    print(e.code, e)\n"
            % os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120, env=clean_env())
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "%d ddstore: unknown option 'bogus'" % library_codes()["INVALID"]
