"""ctypes binding of libddstore.so (the C ABI in python/libddstore/ddstore.h).

Finds the library ($DDSTORE_LIB, next to this package, or the repository's
bin/), declares every function's types, maps error codes onto the
exception classes of ddstore.errors and waits for started calls in slices
so that signals (Ctrl-C) are handled between slices.
"""
import ctypes
import os
import signal
import sys
import threading

from . import errors

DDS_OK, DDS_AGAIN, DDS_EOF = 0, 100, 101
MAX_VARS = 16
SLICE_MS = 100  # longest wait inside the library before Python checks signals

u64 = ctypes.c_uint64
i64 = ctypes.c_int64
i32 = ctypes.c_int32
P = ctypes.c_void_p
S = ctypes.c_char_p
I64P = ctypes.POINTER(ctypes.c_int64)


class Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int32), ("rank", ctypes.c_int32), ("msg", ctypes.c_char * 1024)]


class BatchOut(ctypes.Structure):
    _fields_ = [("batch", u64), ("epoch", i64), ("number", i64), ("rows", i64), ("nvars", i32),
                ("data", P * MAX_VARS), ("nbytes", i64 * MAX_VARS),
                ("indices", I64P), ("indices_cap", i64)]


ErrP = ctypes.POINTER(Err)
_SIGS = {
    "dds_wait": [u64, i32, ctypes.POINTER(u64), ErrP],
    "dds_handle_free": [u64],
    "dds_open_start": [S, ctypes.POINTER(u64), ErrP],
    "dds_close_start": [u64, ctypes.POINTER(u64), ErrP],
    "dds_abandon": [u64, ErrP],
    "dds_add_start": [u64, S, i32, i64, P, i64, ctypes.POINTER(u64), ErrP],
    "dds_init_start": [u64, S, i32, i64, i64, ctypes.POINTER(u64), ErrP],
    "dds_free_start": [u64, S, ctypes.POINTER(u64), ErrP],
    "dds_barrier_start": [u64, ctypes.POINTER(u64), ErrP],
    "dds_info": [u64, ctypes.POINTER(i32), ErrP],
    "dds_query": [u64, S, ctypes.c_char_p, i64, ErrP],
    "dds_update": [u64, S, P, i64, i64, ErrP],
    "dds_get": [u64, S, i64, i64, P, i64, ErrP],
    "dds_get_batch": [u64, S, P, i64, P, i64, ErrP],
    "dds_get_ranges": [u64, S, P, P, i64, P, i64, ErrP],
    "dds_get_start": [u64, S, i64, i64, P, i64, i32, ctypes.POINTER(u64), ErrP],
    "dds_get_batch_start": [u64, S, P, i64, P, i64, i32, ctypes.POINTER(u64), ErrP],
    "dds_get_ranges_start": [u64, S, P, P, i64, P, i64, i32, ctypes.POINTER(u64), ErrP],
    "dds_loader_new": [u64, S, ctypes.POINTER(u64), ErrP],
    "dds_loader_len": [u64, ctypes.POINTER(i64), ErrP],
    "dds_loader_close": [u64, ErrP],
    "dds_loader_epoch": [u64, i64, P, i64, ctypes.POINTER(u64), ErrP],
    "dds_epoch_next": [u64, i32, ctypes.POINTER(BatchOut), ErrP],
    "dds_epoch_stats": [u64, ctypes.POINTER(i64), ErrP],
    "dds_epoch_close": [u64, ErrP],
    "dds_epoch_drain": [u64, ctypes.POINTER(i64), ErrP],
    "dds_batch_retain": [u64, ErrP],
    "dds_batch_release": [u64, ErrP],
}


def _find():
    env = os.environ.get("DDSTORE_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "libddstore.so"),
              os.path.join(here, "..", "..", "bin", "libddstore.so")):
        if os.path.exists(p):
            return os.path.normpath(p)
    raise errors.Error("libddstore.so not found: build it with `make python-lib` "
                       "(bin/libddstore.so) or set DDSTORE_LIB to its path")


_lib = None


def lib():
    """The loaded library (loaded on first use)."""
    global _lib
    if _lib is None:
        # libfabric pulls in libinfinipath (PSM), whose constructor replaces
        # the SIGINT handler by one that exits the process: ask it not to,
        # and put Python's handler back, so that Ctrl-C stays
        # KeyboardInterrupt.
        os.environ.setdefault("IPATH_NO_BACKTRACE", "1")
        main = threading.current_thread() is threading.main_thread()
        before = signal.getsignal(signal.SIGINT) if main else None
        l = ctypes.CDLL(_find())  # CDLL releases the GIL around every call
        if main and before is not None:
            signal.signal(signal.SIGINT, before)
        for name, args in _SIGS.items():
            f = getattr(l, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        l.dds_exit_interrupted.argtypes = []
        l.dds_exit_interrupted.restype = None
        l.dds_end_on_signals.argtypes = [ctypes.c_int]
        l.dds_end_on_signals.restype = ctypes.c_int
        l.dds_error_name.argtypes = [ctypes.c_int]
        l.dds_error_name.restype = ctypes.c_char_p
        errors.learn_codes(lambda code: l.dds_error_name(code))
        _lib = l
    return _lib


END_SIGTERM, END_SIGINT = 1, 2  # DDS_END_* in ddstore.h
_ended = 0  # the DDS_END_* signals the library ends this process on


def end_on_signals():
    """Lets the library end this process on the signals the program leaves
    to Python's defaults (dds_end_on_signals): SIGTERM (SIG_DFL, which
    would leave the store's segment behind) always; SIGINT
    (KeyboardInterrupt) only where srun SIGKILLs the step about 10 ms after
    it forwards Ctrl-C, too soon for a KeyboardInterrupt to unwind, and
    never in an interactive session. On one of them the library abandons
    the open stores, writes one line on stderr and ends the process by the
    signal at once. Called at each open, from the main thread only (where
    Python's handlers live); a handler the program installs later wins."""
    global _ended
    if threading.current_thread() is not threading.main_thread():
        return
    ask = 0
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        ask |= END_SIGTERM
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler and not _interactive():
        ask |= END_SIGINT
    if ask & ~_ended:
        _ended = lib().dds_end_on_signals(ask)


def _interactive():
    """A session whose Ctrl-C interrupts a statement, not the job."""
    return bool(sys.flags.interactive) or hasattr(sys, "ps1") or "ipykernel" in sys.modules


def _after_fork_in_child():
    """A forked child (a DataLoader worker) inherits the library's signal
    handler but not the library's threads, which would never act on a
    signal: Python's own handling goes back in place."""
    global _ended
    for flag, sig in ((END_SIGTERM, signal.SIGTERM), (END_SIGINT, signal.SIGINT)):
        h = signal.getsignal(sig)
        if _ended & flag and h is not None:
            signal.signal(sig, h)
    _ended = 0


os.register_at_fork(after_in_child=_after_fork_in_child)


def check(rc, err):
    """Raises the exception of a failed call's code."""
    if rc != DDS_OK:
        raise errors.from_code(rc, err.rank, err.msg.decode("utf-8", "replace"))


# Calls abandoned by an exception (KeyboardInterrupt) while the library
# still runs them: (call handle, what it uses). The buffers they read from
# or write into stay referenced here until the library is done with them.
_abandoned = []
_abandoned_mu = threading.Lock()  # threads prune and append concurrently


def pending():
    """How many abandoned calls the library still runs (forgets the
    finished ones)."""
    with _abandoned_mu:
        if _abandoned:
            l = lib()
            _abandoned[:] = [(c, k) for c, k in _abandoned if l.dds_wait(c, 0, None, None) == DDS_AGAIN]
        return len(_abandoned)


def _run(fn, args, keep):
    """Calls fn(*args, &call, &err). When that leaves a call running in the
    library (a call handle in call), waits for it in slices of SLICE_MS
    with the GIL released, so that signals are handled between slices. An
    exception meanwhile (Ctrl-C) abandons the call: keep, the buffers it
    uses, stays referenced until it is done. Returns the call's result."""
    if _abandoned:
        pending()
    call, err = u64(), Err()
    res = None
    try:
        rc = fn(*args, ctypes.byref(call), ctypes.byref(err))
        h = call.value
        if h:
            l, res = lib(), u64()
            while True:
                rc = l.dds_wait(h, SLICE_MS, ctypes.byref(res), ctypes.byref(err))
                if rc != DDS_AGAIN:
                    break
            call.value = 0  # dds_wait ended the handle
    except BaseException:
        if call.value:
            with _abandoned_mu:
                _abandoned.append((call.value, keep))
        raise
    check(rc, err)
    return res.value if res is not None else None


def start(fn, *args, keep=None):
    """Starts a collective call fn(*args, &call, &err) and waits for it;
    returns its result."""
    return _run(fn, args, keep)


def read(fn, args, keep):
    """Runs a read fn(*args, &call, &err) whose last argument is its slice
    (SLICE_MS, or -1 for the caller's thread): done within it (or in the
    caller's thread when every shard is mapped), or waited for in slices
    like a collective."""
    _run(fn, args, keep)
