"""Loader: the engine's data loader (Go workers, prefetch, batched reads
straight into off-heap batch buffers) as a Python iterable yielding dicts
of torch tensors that view those buffers without a copy."""
import ctypes
import json
import os

import numpy as np

from . import _lib
from . import errors
from .store import integers

try:
    import torch
    _Base = torch.utils.data.IterableDataset
except ImportError:  # numpy arrays instead of tensors
    torch = None
    _Base = object


class _Lease:
    """One reference to a batch's off-heap buffers. Every array (and so
    every tensor) viewing them holds this object; the buffers go back to
    the loader's pool when the last view is gone, or at release()."""
    __slots__ = ("h", "pid", "__weakref__")

    def __init__(self, h):
        self.h = h
        self.pid = os.getpid()

    def release(self):
        h, self.h = self.h, 0
        if h and os.getpid() == self.pid and _lib._lib is not None:
            err = _lib.Err()
            _lib.check(_lib._lib.dds_batch_release(h, ctypes.byref(err)), err)

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


class _View:
    """An array interface over off-heap memory (made once per buffer)."""
    __slots__ = ("__array_interface__",)


class _Leased(np.ndarray):
    """A view of a batch buffer that holds the batch's lease: tensors made
    from it (torch.from_numpy) keep it, and so the lease, alive."""


class Batch(dict):
    """One batch: {variable: tensor (batch, *row shape)} plus "index" (the
    global rows, int64). .epoch and .number say where it is; release()
    returns the buffers at once (the tensors must not be used after it)."""

    def __init__(self, data, epoch, number, lease):
        super().__init__(data)
        self.epoch, self.number, self._lease = epoch, number, lease

    def release(self):
        if self._lease is not None:
            self._lease.release()
            self._lease = None


class Loader(_Base):
    """Batches of one or more variables of a store, read by Go workers.

    Loader(store, names, batch_size, shuffle=True, seed=0, drop_last=False,
    workers=1, prefetch=2, sampler=None, copy=False, shapes=None,
    batch_get=True, fast_collate=True, thread_readers=True, num_replicas=None,
    rank=None, timeout=120).

    DistributedSampler semantics by default: each rank of the store's width
    group gets its share of a permutation seeded with seed+epoch (set_epoch),
    padded (or truncated with drop_last) to equal counts. sampler gives the
    order instead: a callable epoch -> indices, or an iterable of indices
    (a torch Sampler; its set_epoch is called).

    Iterating yields Batch dicts of tensors shaped (batch, *row shape) that
    view the loader's off-heap buffers (zero copy); copy=True gives owned
    tensors. len() is the number of batches per epoch. It is a torch
    IterableDataset: DataLoader(loader, batch_size=None, num_workers=0).
    """

    def __init__(self, store, names, batch_size, shuffle=True, seed=0, drop_last=False, workers=1,
                 prefetch=2, sampler=None, copy=False, shapes=None, batch_get=True, fast_collate=True,
                 thread_readers=True, num_replicas=None, rank=None, timeout=120):
        if isinstance(names, str):
            names = [names]
        names = list(names)
        h = store._check()
        self._pid = os.getpid()
        self._store = store
        self._h = 0
        self.names = names
        self.batch_size = int(batch_size)
        self.copy = bool(copy)
        self.sampler = sampler
        self.epoch = 0
        self._vars = [store._var(n) for n in names]
        shapes = shapes or {}
        self._shapes = [tuple(shapes.get(n, v.shape)) for n, v in zip(names, self._vars)]
        for n, v, s in zip(names, self._vars, self._shapes):
            if int(np.prod(s)) * v.itemsize != v.row_bytes:
                raise errors.make(errors.DTypeError, "ddstore: Loader: shape %s of %r holds %d bytes, rows are %d bytes"
                                  % (s, n, int(np.prod(s)) * v.itemsize, v.row_bytes))
        self._typestr = [v.np_dtype().str for v in self._vars]
        opts = {"vars": names, "batch_size": self.batch_size, "seed": int(seed), "shuffle": bool(shuffle),
                "drop_last": bool(drop_last), "workers": int(workers), "prefetch": int(prefetch),
                "batch_get": bool(batch_get), "fast_collate": bool(fast_collate),
                "thread_readers": bool(thread_readers), "timeout_ms": int(float(timeout) * 1000)}
        if num_replicas is not None:
            opts["replicas"] = int(num_replicas)
            opts["rank"] = int(rank or 0)
        out = _lib.u64()
        err = _lib.Err()
        _lib.check(_lib.lib().dds_loader_new(h, json.dumps(opts).encode(), ctypes.byref(out), ctypes.byref(err)), err)
        self._h = out.value
        lens = (_lib.i64 * 3)()
        _lib.check(_lib.lib().dds_loader_len(self._h, lens, ctypes.byref(err)), err)
        self.rows_per_epoch, self._batches, self.pool_size = lens[0], lens[1], lens[2]
        self._drop_last = bool(drop_last)
        self._ep = 0
        self._bases = {}
        self.last_stats = None
        store._loaders.add(self)

    def _check(self):
        if os.getpid() != self._pid:
            raise errors.make(errors.ForkError, "ddstore: Loader used in a forked child (pid %d); only the process "
                              "that created it (pid %d) may use it: use DataLoader(num_workers=0), the loader's "
                              "Go workers do the prefetch" % (os.getpid(), self._pid))
        if not self._h:
            raise errors.make(errors.ClosedError, "ddstore: Loader closed")
        return self._h

    def set_epoch(self, epoch):
        """Selects the epoch of the next iteration (seed+epoch shuffle)."""
        self.epoch = int(epoch)

    def _indices(self):
        s = self.sampler
        if s is None:
            return None
        if callable(s) and not hasattr(s, "__iter__"):
            idx = s(self.epoch)
        else:
            if hasattr(s, "set_epoch"):
                s.set_epoch(self.epoch)
            idx = list(s)
        if not hasattr(idx, "__len__"):
            idx = list(idx)  # a generator or iterator
        return integers(idx, "Loader: sampler's indices")

    def __len__(self):
        if self.sampler is not None and hasattr(self.sampler, "__len__"):
            n = len(self.sampler)
            return n // self.batch_size if self._drop_last else -(-n // self.batch_size)
        return self._batches

    def __iter__(self):
        h = self._check()
        idx = self._indices()
        err = _lib.Err()
        ep = _lib.u64()
        l = _lib.lib()
        if idx is None:
            rc = l.dds_loader_epoch(h, self.epoch, None, -1, ctypes.byref(ep), ctypes.byref(err))
        else:
            rc = l.dds_loader_epoch(h, self.epoch, ctypes.c_void_p(idx.ctypes.data), len(idx), ctypes.byref(ep),
                                    ctypes.byref(err))
        _lib.check(rc, err)
        return _Epoch(self, ep.value)

    def close(self):
        """Stops the workers and frees the pool; batches still held stay
        valid until released. Closing twice is a no-op."""
        if self._h and os.getpid() == self._pid:
            h, self._h = self._h, 0
            if self._ep:
                _lib.lib().dds_epoch_close(self._ep, None)
                _lib.lib().dds_handle_free(self._ep)
                self._ep = 0
            err = _lib.Err()
            rc = _lib.lib().dds_loader_close(h, ctypes.byref(err))
            _lib.lib().dds_handle_free(h)
            _lib.check(rc, err)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Epoch:
    """The iterator of one epoch (a new one closes the previous)."""

    def __init__(self, loader, h):
        if loader._ep:
            _lib.lib().dds_epoch_close(loader._ep, None)
            _lib.lib().dds_handle_free(loader._ep)
        loader._ep = h
        self.loader = loader
        self.h = h
        self.out = _lib.BatchOut()
        self.idx = np.empty(loader.batch_size, dtype=np.int64)
        self.out.indices = self.idx.ctypes.data_as(_lib.I64P)
        self.out.indices_cap = loader.batch_size
        self.err = _lib.Err()
        self.next_fn = _lib.lib().dds_epoch_next
        # Full-size arrays over each batch buffer, by address: the pool's
        # buffers recur, so a batch costs one slice per variable.
        self.bases = loader._bases

    def base(self, i, addr):
        b = self.bases.get((i, addr))
        if b is None:
            ld = self.loader
            if len(self.bases) > 8 * ld.pool_size * len(ld.names):
                self.bases.clear()  # buffers beyond the pool came and went
            v = _View()
            v.__array_interface__ = {"data": (addr, False), "shape": (ld.batch_size,) + ld._shapes[i],
                                     "typestr": ld._typestr[i], "version": 3}
            b = self.bases[(i, addr)] = np.asarray(v)
        return b

    def __iter__(self):
        return self

    def stats(self):
        """(wait s, step s, batches, rows) inside Next so far."""
        st = (_lib.i64 * 4)()
        _lib.check(_lib.lib().dds_epoch_stats(self.h, st, ctypes.byref(self.err)), self.err)
        return st[0] / 1e9, st[1] / 1e9, st[2], st[3]

    def drain_in_go(self):
        """Consumes the rest of the epoch in Go without Python tensors
        (the Go consumer's rate): (batches, rows, seconds)."""
        self.loader._check()
        st = (_lib.i64 * 3)()
        _lib.check(_lib.lib().dds_epoch_drain(self.h, st, ctypes.byref(self.err)), self.err)
        return st[0], st[1], st[2] / 1e9

    def __next__(self):
        ld = self.loader
        ld._check()
        if ld._ep != self.h:
            raise errors.make(errors.ClosedError, "ddstore: Loader epoch iterator superseded by a newer one")
        out, err, nxt, h = self.out, self.err, self.next_fn, self.h
        pout, perr = ctypes.byref(out), ctypes.byref(err)
        while True:
            rc = nxt(h, _lib.SLICE_MS, pout, perr)  # GIL released; signals handled between slices
            if rc != _lib.DDS_AGAIN:
                break
        if rc == _lib.DDS_EOF:
            ld.last_stats = self.stats()
            raise StopIteration
        _lib.check(rc, err)
        rows = out.rows
        lease = _Lease(out.batch)
        data = {}
        for i, name in enumerate(ld.names):
            if ld.copy:
                a = self.base(i, out.data[i])[:rows].copy()
            else:
                a = self.base(i, out.data[i])[:rows].view(_Leased)
                a.lease = lease
            data[name] = torch.from_numpy(a) if torch is not None else a
        index = self.idx[:rows].copy()
        data["index"] = torch.from_numpy(index) if torch is not None else index
        b = Batch(data, out.epoch, out.number, lease)
        if ld.copy:
            b.release()
        return b
