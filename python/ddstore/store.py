"""DDStore: the distributed store, with ORNL pyddstore's names and
argument order (add, get, init, update, epoch_begin/epoch_end, free) plus
get_batch, get_ranges, query, barrier, close and a context manager."""
import atexit
import ctypes
import json
import operator
import os
import random
import secrets
import signal
import socket
import sys
import weakref

import numpy as np

from . import _lib
from . import errors

# dtype name -> (engine DType code, numpy dtype)
DTYPES = {
    "int32": (1, np.dtype(np.int32)),
    "int64": (2, np.dtype(np.int64)),
    "uint8": (3, np.dtype(np.uint8)),
    "float32": (4, np.dtype(np.float32)),
    "float64": (5, np.dtype(np.float64)),
    "bool": (6, np.dtype(np.bool_)),
}
BYTES_CODE = 7  # raw bytes: init(..., itemsize=k) without a dtype
_BY_NP = {v[1]: (name, v[0]) for name, v in DTYPES.items()}


def _np_dtype(x):
    try:
        dt = np.dtype(x)
    except TypeError:
        dt = None
    if dt is None or dt not in _BY_NP:
        raise errors.make(errors.DTypeError, "ddstore: dtype %s is not one of %s"
                          % (dt if dt is not None else repr(x), ", ".join(DTYPES)))
    return dt


def _as_array(a):
    """numpy view of an ndarray or a CPU torch tensor."""
    if not isinstance(a, np.ndarray):
        if hasattr(a, "numpy") and hasattr(a, "is_contiguous"):
            a = a.detach().numpy()
        else:
            raise errors.make(errors.DTypeError, "ddstore: want a numpy array or a torch tensor, got %s"
                              % type(a).__name__)
    return a


_BOOLS = frozenset((bool, np.bool_))  # not integers here, though Python's bool is an int


def integer(x, what):
    """x as an int: a Python or numpy integer (not a bool, not a float even
    when whole); else DTypeError naming what (e.g. "get 'f': start")."""
    if type(x) not in _BOOLS:
        try:
            return operator.index(x)
        except TypeError:
            pass
    raise errors.make(errors.DTypeError, "ddstore: %s must be an integer, not %s (%r)" % (what, type(x).__name__, x))


def integers(values, what):
    """values (a sequence, numpy array or CPU tensor of integers of any
    width) as a contiguous 1-D int64 array, the same memory when it is one;
    floats (even whole), bools (True would read row 1) and strings raise
    DTypeError naming what (e.g. "get_batch 'f': indices") and the
    offending value's type."""
    a = values if isinstance(values, np.ndarray) else np.asarray(values)
    # numpy makes [1, True] int64: look for bools in a list's items
    if a.size and (a.dtype.kind not in "iu" or
                   isinstance(values, (list, tuple)) and not _BOOLS.isdisjoint(map(type, values))):
        raise errors.make(errors.DTypeError, "ddstore: %s must be integers, not %s" % (what, _not_integer(values, a)))
    return np.ascontiguousarray(a, dtype=np.int64).reshape(-1)


def _not_integer(values, a):
    """Names the first value of values (a: as an array) that is no integer."""
    if isinstance(values, (list, tuple)):
        for i, x in enumerate(values):
            if type(x) in _BOOLS or not isinstance(x, (int, np.integer)):
                return "%s (%r at position %d)" % (type(x).__name__, x, i)
    if a.ndim == 0 and not hasattr(values, "dtype"):
        return "%s (%r)" % (type(values).__name__, values)
    hint = " (a mask? np.flatnonzero(mask) gives its rows)" if a.dtype == np.bool_ else ""
    return "%s with dtype %s%s" % (type(values).__name__, a.dtype, hint)


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def free_port(host=""):
    """A TCP port that was free on host a moment ago, picked at random below
    the kernel's ephemeral range as cmd/ddrun/launch.FreePort does: no outgoing
    connection or port-0 bind of another process can take it before the
    rank binds it."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    picks = [random.randrange(10000, lo) for _ in range(64)] if lo - 10000 >= 1000 else []
    for port in picks + [0]:
        s = socket.socket()
        try:
            s.bind((host, port))
            return s.getsockname()[1]
        except OSError:
            if port == 0:
                raise
        finally:
            s.close()


class _Var:
    """What Python knows of a variable: dtype, row shape, sizes."""
    __slots__ = ("name", "bname", "code", "dtype", "shape", "row_bytes", "global_rows", "itemsize", "info")

    def __init__(self, name, info, shape, itemsize):
        self.name = name
        self.bname = name.encode()
        self.info = info
        self.code = info["dtype_code"]
        self.row_bytes = info["row_bytes"]
        self.global_rows = info["global_rows"]
        if self.code == BYTES_CODE:
            self.dtype, self.itemsize = None, itemsize or 1
        else:
            self.dtype = DTYPES[info["dtype"]][1]
            self.itemsize = self.dtype.itemsize
        if shape is None:
            shape = (self.row_bytes // self.itemsize,)
        self.shape = tuple(shape)

    def check_dtype(self, dt, what, arg):
        """DTypeError unless dtype dt (of argument arg of call what) fits:
        the variable's dtype, or its item size for raw items."""
        if self.dtype is not None and dt != self.dtype:
            raise errors.make(errors.DTypeError, "ddstore: %s %r: %s has dtype %s, variable %r has dtype %s"
                              % (what, self.name, arg, dt, self.name, self.dtype))
        if self.dtype is None and dt.itemsize != self.itemsize:
            raise errors.make(errors.DTypeError, "ddstore: %s %r: %s has dtype %s (items of %d bytes), variable %r "
                              "has raw items of %d bytes" % (what, self.name, arg, dt, dt.itemsize, self.name,
                                                             self.itemsize))

    def np_dtype(self):
        return self.dtype if self.dtype is not None else np.dtype("u%d" % self.itemsize if self.itemsize in (1, 2, 4, 8) else np.uint8)


class DDStore:
    """One rank's view of the distributed store.

    DDStore(comm=None, method=0, **options). comm is an optional mpi4py
    communicator: its ranks form the store (bootstrap through a TCP
    rendezvous that rank 0 broadcasts). Without it the engine's own
    bootstrap reads the launcher's environment (MPICH mpiexec's PMI, srun,
    torchrun variables, ddrun; Open MPI's mpirun on one node, where the
    ranks meet in the node's session directory), or makes a single-rank
    store. method is accepted for
    pyddstore compatibility; the engine chooses its transport (shared memory
    on a node, libfabric between nodes).

    options: config (machine YAML), node_mode ("auto" | "fabric"), provider,
    iface, read_mode, width (ddstore_width), timeout (s), fabric_timeout (s),
    telemetry (bool), telemetry_dir, shard_dir, interruptible_reads (bool,
    default True; see below), bootstrap (a dict: method,
    addr, dir, token, rank, world, job, overriding the launcher's view, and
    timeout (s), the bootstrap's own deadline, else timeout's).

    Only the process that created the store may use it: in a forked child
    every call raises ForkError.

    close() is optional: a store still open when the process that created
    it exits is closed then (close_open_stores, an atexit hook), collective
    as close() is, so it meets the other ranks when they finish too; a
    failure (a dead rank, the timeout) is one line on stderr. Use
    `with DDStore(...)` or close() to release the store earlier.

    Every call that may wait for another rank (the collectives, and reads
    through the fabric) waits in slices of at most 0.1 s with the GIL
    released, so Ctrl-C raises KeyboardInterrupt promptly. An interrupted
    call goes on in the library until it ends or times out; the arrays it
    reads or writes stay referenced until then (an interrupted read's out
    holds undefined rows), and the store stays usable. A read through the
    fabric therefore runs on a library thread while the caller waits: a
    thread handoff per call (a few us on bare metal, 70-200 us on a loaded
    VM). interruptible_reads=False reads in the calling thread instead,
    with no handoff, but Ctrl-C then waits until the read ends (at most
    fabric_timeout). Reads of a store whose shards are all on this node
    (no fabric) always run in the calling thread.

    SIGTERM (scancel, a time limit, a launcher stopping the job), while
    the program leaves it at its default, ends the process at once with its
    stores abandoned (segments and shard files removed) and one line on
    stderr, instead of leaving them behind. So does Ctrl-C in a Slurm step
    (srun): srun SIGKILLs the tasks about 10 ms after it forwards Ctrl-C,
    too soon for a KeyboardInterrupt to unwind, so the process ends by
    SIGINT without one (srun then reports the interrupt, exit 130). With
    SLURM_DISABLE_STATUS=1 in srun's environment srun forwards one Ctrl-C
    alone and Ctrl-C raises KeyboardInterrupt, as under mpiexec and ddrun
    and in an interactive session. A handler of the program's own
    (signal.signal) always wins.
    """

    def __init__(self, comm=None, method=0, **options):
        self._pid = os.getpid()
        self._h = 0
        self._closed = False
        self._vars = {}
        self._shapes = {}
        self._itemsize = {}
        self._loaders = weakref.WeakSet()
        self.method = method
        self.interruptible_reads = options.pop("interruptible_reads", True)
        opts = {}
        keymap = {"config": "config", "node_mode": "node_mode", "provider": "provider", "iface": "iface",
                  "read_mode": "read_mode", "width": "width", "ddstore_width": "width",
                  "telemetry": "telemetry", "telemetry_dir": "telemetry_dir", "shard_dir": "shard_dir",
                  "bootstrap": "bootstrap"}
        for k, v in options.items():
            if k in ("timeout", "fabric_timeout"):
                opts[k + "_ms"] = int(float(v) * 1000)
            elif k == "bootstrap" and v is not None:
                v = dict(v)
                if "timeout" in v:
                    v["timeout_ms"] = int(float(v.pop("timeout")) * 1000)
                opts[k] = v
            elif k in keymap:
                if v is not None:
                    opts[keymap[k]] = v
            else:
                raise errors.make(errors.InvalidError, "ddstore: unknown option %r" % k)
        if comm is not None:
            opts["bootstrap"] = self._comm_bootstrap(comm)
        try:
            self._h = _lib.start(_lib.lib().dds_open_start, json.dumps(opts).encode())
        except errors.InvalidError as e:
            if "rendezvous of its own" not in e.msg:
                raise
            raise errors.InvalidError(e.code, e.rank, e.msg + " (from Python: DDStore(bootstrap={'method': 'tcp', "
                                      "'addr': 'host:port'}) or {'method': 'dir', 'dir': path})") from None
        info = (ctypes.c_int32 * 4)()
        err = _lib.Err()
        _lib.check(_lib.lib().dds_info(self._h, info, ctypes.byref(err)), err)
        self.rank, self.size, self.width, self.local_rank = info[0], info[1], info[2], info[3]
        _open_stores[id(self)] = self
        _lib.end_on_signals()

    @staticmethod
    def _comm_bootstrap(comm):
        rank, size = comm.Get_rank(), comm.Get_size()
        addr = None
        if rank == 0:
            port = free_port()
            host = os.environ.get("DDSTORE_BOOTSTRAP_HOST") or socket.gethostbyname(socket.gethostname())
            addr = ("%s:%d" % (host, port), "py-" + secrets.token_hex(6))
        addr, job = comm.bcast(addr, root=0)
        return {"method": "tcp", "addr": addr, "rank": rank, "world": size, "job": job, "token": job}

    # ---- state ----

    def _check(self):
        if os.getpid() != self._pid:
            raise errors.make(errors.ForkError, "ddstore: store used in a forked child (pid %d); only the process "
                              "that created it (pid %d) may use it: open a new store in the child, or use "
                              "DataLoader(num_workers=0) with ddstore.Loader's own workers" % (os.getpid(), self._pid))
        if self._closed:
            raise errors.make(errors.ClosedError, "ddstore: store closed")
        return self._h

    @property
    def closed(self):
        return self._closed

    @property
    def interruptible_reads(self):
        """Whether reads through the fabric wait in slices on a library
        thread (Ctrl-C works) or run in the calling thread (no handoff)."""
        return self._slice >= 0

    @interruptible_reads.setter
    def interruptible_reads(self, on):
        self._slice = _lib.SLICE_MS if on else -1

    def _var(self, name):
        v = self._vars.get(name)
        if v is None:
            info = self.query(name)
            v = _Var(name, info, self._shapes.get(name), self._itemsize.get(name))
            self._vars[name] = v
        return v

    # ---- collectives ----

    def add(self, name, arr):
        """Creates variable name from this rank's rows arr (collective):
        rows = arr.shape[0]; every rank passes the same dtype and row shape."""
        h = self._check()
        a = np.ascontiguousarray(_as_array(arr))
        if a.ndim == 0:
            raise errors.make(errors.DTypeError, "ddstore: add %r: a 0-d array has no rows" % name)
        code = DTYPES[_BY_NP[_np_dtype(a.dtype)][0]][0]
        shape = a.shape[1:]
        elems = int(np.prod(shape)) if shape else 1
        _lib.start(_lib.lib().dds_add_start, h, name.encode(), code, elems, _ptr(a), a.nbytes, keep=a)
        self._shapes[name] = shape
        self._vars.pop(name, None)

    def init(self, name, nrows, disp, itemsize=1, dtype=None):
        """Creates variable name with nrows zero rows on this rank
        (collective), disp elements per row of itemsize bytes. Without
        dtype the rows are raw items of itemsize bytes: update and get
        accept any array of that item size (pyddstore's rule); with dtype
        the variable is typed."""
        h = self._check()
        if dtype is not None:
            dt = _np_dtype(dtype)
            code, elems, isz = DTYPES[_BY_NP[dt][0]][0], int(disp), dt.itemsize
            if itemsize not in (1, dt.itemsize):
                raise errors.make(errors.DTypeError, "ddstore: init %r: itemsize %d disagrees with dtype %s"
                                  % (name, itemsize, dt))
        else:
            if int(itemsize) <= 0:
                raise errors.make(errors.DTypeError, "ddstore: init %r: itemsize %d" % (name, itemsize))
            code, elems, isz = BYTES_CODE, int(disp) * int(itemsize), int(itemsize)
        _lib.start(_lib.lib().dds_init_start, h, name.encode(), code, elems, int(nrows))
        self._shapes[name] = (int(disp),)
        self._itemsize[name] = isz
        self._vars.pop(name, None)

    def free(self, name=None):
        """Frees variable name, or every variable (pyddstore's free()), on
        every rank (collective)."""
        h = self._check()
        names = [name] if name is not None else sorted(self._known_names())
        for n in names:
            _lib.start(_lib.lib().dds_free_start, h, n.encode())
            self._vars.pop(n, None)
            self._shapes.pop(n, None)
            self._itemsize.pop(n, None)

    def _known_names(self):
        return set(self._shapes)

    def barrier(self):
        """Returns once every rank has called it (collective)."""
        _lib.start(_lib.lib().dds_barrier_start, self._check())

    def epoch_begin(self):
        """pyddstore compatibility: reads are one-sided and need no access
        epoch, so this only checks that the store is usable."""
        self._check()

    def epoch_end(self):
        """pyddstore compatibility; see epoch_begin."""
        self._check()

    def close(self):
        """Closes the store (collective): its loaders first. Closing twice,
        or any use after close, raises ClosedError."""
        h = self._check()
        try:
            for l in list(self._loaders):
                l.close()
        finally:
            # The store is closed even when a loader's close fails: the
            # other ranks wait for this rank at the close barrier.
            self._closed = True
            _open_stores.pop(id(self), None)
            try:
                _lib.start(_lib.lib().dds_close_start, h)
            finally:
                _lib.lib().dds_handle_free(h)
                self._h = 0

    def _abandon(self):
        """For a process ending by an uncaught exception (Ctrl-C): removes
        the store's telemetry segment and shard files without meeting the
        other ranks, who are not at a close (dds_abandon)."""
        h = self._h
        self._closed = True
        _open_stores.pop(id(self), None)
        err = _lib.Err()
        try:
            _lib.check(_lib.lib().dds_abandon(h, ctypes.byref(err)), err)
        finally:
            _lib.lib().dds_handle_free(h)
            self._h = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if not self._closed and os.getpid() == self._pid:
            self.close()
        return False

    # ---- local calls ----

    def query(self, name):
        """Describes variable name: dtype, row_elems, row_bytes,
        global_rows, local_rows, local_start, shards, group."""
        h = self._check()
        buf = ctypes.create_string_buffer(4096)
        err = _lib.Err()
        _lib.check(_lib.lib().dds_query(h, name.encode(), buf, len(buf), ctypes.byref(err)), err)
        info = json.loads(buf.value)
        if name in self._shapes:
            info["shape"] = self._shapes[name]
        return info

    def update(self, name, arr, offset=0):
        """Overwrites this rank's local rows from local row offset (local)."""
        h = self._check()
        v = self._var(name)
        a = np.ascontiguousarray(_as_array(arr))
        v.check_dtype(a.dtype, "update", "arr")
        offset = integer(offset, "update %r: offset" % name)
        err = _lib.Err()
        _lib.check(_lib.lib().dds_update(h, v.bname, _ptr(a), a.nbytes, offset, ctypes.byref(err)), err)

    @staticmethod
    def _given_out(v, out, what):
        """out as a numpy array, checked: writable, C-contiguous, of v's dtype."""
        out = _as_array(out)
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise errors.make(errors.InvalidError, "ddstore: %s %r: out must be a writable C-contiguous array"
                              % (what, v.name))
        v.check_dtype(out.dtype, what, "out")
        return out

    def _out(self, v, out, rows, what):
        """The destination of rows rows: out checked, or a new array."""
        if out is None:
            return np.empty((rows,) + v.shape, dtype=v.np_dtype())
        out = self._given_out(v, out, what)
        if out.nbytes < rows * v.row_bytes:
            raise errors.make(errors.ShortBufferError, "ddstore: %s %r: %d rows of %d bytes need %d bytes, out has %d"
                              % (what, v.name, rows, v.row_bytes, rows * v.row_bytes, out.nbytes))
        return out

    def get(self, name, out, start=0):
        """Reads out.shape[0] rows starting at global row start into out
        (pyddstore's get). Returns out."""
        h = self._check()
        v = self._var(name)
        start = integer(start, "get %r: start" % name)
        out = self._given_out(v, out, "get")
        count = out.shape[0] if out.ndim else 1
        if out.nbytes != count * v.row_bytes:
            raise errors.make(errors.DTypeError, "ddstore: get %r: out rows are %d bytes, variable rows %d bytes"
                              % (name, out.nbytes // count, v.row_bytes))
        _lib.read(_lib.lib().dds_get_start, (h, v.bname, start, count, _ptr(out), out.nbytes, self._slice),
                  (v.bname, out))
        return out

    def get_batch(self, name, indices, out=None):
        """Reads the global rows indices (any order, duplicates allowed) in
        one call; returns out (allocated when None), shape (n, *row shape)."""
        h = self._check()
        v = self._var(name)
        idx = integers(indices, "get_batch %r: indices" % name)
        out = self._out(v, out, len(idx), "get_batch")
        _lib.read(_lib.lib().dds_get_batch_start, (h, v.bname, _ptr(idx), len(idx), _ptr(out), out.nbytes,
                                                     self._slice), (v.bname, idx, out))
        return out

    def get_ranges(self, name, starts, lengths, out=None):
        """Reads variable-length records in one call: record i is rows
        [starts[i], starts[i]+lengths[i]) (bytes, for a uint8 variable of
        one byte per row). Returns (buf, offsets): the records packed in
        buf (shape (sum(lengths), *row shape)), record i at
        buf[offsets[i]:offsets[i+1]]."""
        h = self._check()
        v = self._var(name)
        st = integers(starts, "get_ranges %r: starts" % name)
        ln = integers(lengths, "get_ranges %r: lengths" % name)
        if len(st) != len(ln):
            raise errors.make(errors.InvalidError, "ddstore: get_ranges %r: %d starts and %d lengths"
                              % (name, len(st), len(ln)))
        offsets = np.zeros(len(ln) + 1, dtype=np.int64)
        np.cumsum(ln, out=offsets[1:])
        if len(ln) and ln.min() < 0:
            i = int(np.argmin(ln))
            raise errors.make(errors.OutOfRangeError, "ddstore: get_ranges %r: record %d has length %d"
                              % (name, i, ln[i]))
        out = self._out(v, out, int(offsets[-1]), "get_ranges")
        _lib.read(_lib.lib().dds_get_ranges_start, (h, v.bname, _ptr(st), _ptr(ln), len(st), _ptr(out), out.nbytes,
                                                      self._slice), (v.bname, st, ln, out))
        return out, offsets

    def __del__(self):
        # Never call into the library from a forked child or the garbage
        # collector (close is collective): an open store is kept in
        # _open_stores until close() or exit (close_open_stores).
        pass

    def __repr__(self):
        state = "closed" if self._closed else "rank %d of %d" % (self.rank, self.size)
        return "<ddstore.DDStore %s>" % state


PyDDStore = DDStore

# The stores this process opened and has not closed, in the order opened:
# held here so that one a script dropped unclosed (a local of main()) is
# still closed at exit, with the other ranks.
_open_stores = {}


@atexit.register
def close_open_stores():
    """Closes, at exit, every store still open that this process created
    (never a forked child's copy), its loaders first as close() does: ORNL
    pyddstore scripts never call close(). When the program ends by an
    uncaught exception (Ctrl-C's KeyboardInterrupt, an error) the other
    ranks are not at a close: the store is abandoned instead (its segment
    and shard files removed, no barrier), so that the process ends at once
    and the launcher sees the interrupt; after a KeyboardInterrupt the
    process then ends as an interrupt (end_by_sigint). Never raises: a failure (a
    dead rank, the close barrier's timeout) or Ctrl-C is one line on stderr."""
    uncaught = getattr(sys, "last_type", None)  # set by the interpreter's report of it
    abandoned = False
    for s in list(_open_stores.values()):
        if s.closed or s._pid != os.getpid():
            continue
        which = "rank %d of %d" % (s.rank, s.size)
        try:
            if uncaught is not None:
                abandoned = True
                s._abandon()
                continue
            s.close()
        except Exception as e:  # noqa: BLE001 - reported; the exit goes on
            print("ddstore: closing the store (%s) at exit failed: %s: %s"
                  % (which, type(e).__name__, " ".join(str(e).split())), file=sys.stderr)
        except KeyboardInterrupt:
            print("ddstore: closing the store (%s) at exit interrupted" % which, file=sys.stderr)
            return
    if abandoned and issubclass(uncaught, KeyboardInterrupt):
        end_by_sigint()


def end_by_sigint():
    """Ends the process after Ctrl-C, as the launcher reports an
    interrupt, after flushing stdout, stderr and the logging module's
    handlers. Under MPICH's mpiexec it exits with code 130, its output
    held open until mpiexec has seen the exit (dds_exit_interrupted):
    mpiexec takes the first rank that ends by a signal for a failure, kills
    the others (SIGKILL) and reports "signal 11" (2 | 9), and it drops the
    status of a rank it finds exited too late. Elsewhere the process ends
    by SIGINT now, as a C program does; the interpreter would too, but only
    after finalizing. Exit hooks registered before ddstore's do not run."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
            pass
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    _lib.lib().dds_exit_interrupted()  # returns unless under mpiexec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
