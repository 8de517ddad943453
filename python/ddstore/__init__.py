"""ddstore: the Go ddstore engine from Python.

DDStore (alias PyDDStore) keeps ORNL pyddstore's methods and argument
order (add, get, init, update, epoch_begin/epoch_end, free) and adds
get_batch, get_ranges (variable-length records in one call), query,
barrier, close and a context manager. Loader yields dicts of torch tensors
that view the engine's off-heap batch buffers without a copy.

Every error is a ddstore.Error and the builtin exception of its cause
(IndexError, KeyError, ValueError, TypeError, TimeoutError,
ConnectionError with .rank for a dead peer).
"""
from .errors import (Error, OutOfRangeError, UnknownVariableError, ShortBufferError, DTypeError,
                     MismatchError, ExistsError, PeerDeadError, ClosedError, DeadlineError, InvalidError,
                     ForkError)
from .store import DDStore, PyDDStore, DTYPES


def __getattr__(name):
    """Loader and Batch on first use: their module imports torch (about
    1 s a process, 4 s for 4 ranks on 2 cores), which a program that only
    keeps and reads rows does not need."""
    if name in ("Loader", "Batch"):
        from . import loader
        return getattr(loader, name)
    raise AttributeError("module 'ddstore' has no attribute %r" % name)


__all__ = ["DDStore", "PyDDStore", "Loader", "Batch", "DTYPES", "Error", "OutOfRangeError",
           "UnknownVariableError", "ShortBufferError", "DTypeError", "MismatchError", "ExistsError",
           "PeerDeadError", "ClosedError", "DeadlineError", "InvalidError", "ForkError"]
