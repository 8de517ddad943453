"""Exceptions of ddstore. Every one subclasses ddstore.Error and the
builtin exception a Python caller expects for its cause."""


class Error(Exception):
    """Any ddstore error. .code is the C ABI's DDS_ERR_* code, .rank the
    rank concerned (or -1)."""

    def __init__(self, *args):
        # (code, rank, msg) from the library; (msg) when re-raised by
        # torch's DataLoader from a worker.
        code, rank, msg = args if len(args) == 3 else (0, -1, " ".join(map(str, args)))
        super().__init__(msg)
        self.code, self.rank, self.msg = code, rank, msg

    def __str__(self):  # KeyError would print the repr
        return self.msg


class OutOfRangeError(Error, IndexError):
    """A row or range outside the variable, or an update outside the shard."""
    kind = "INDEX"


class UnknownVariableError(Error, KeyError):
    """No variable of that name."""
    kind = "UNKNOWN_VAR"


class ShortBufferError(Error, ValueError):
    """A destination too small for the rows asked."""
    kind = "SHORT"


class DTypeError(Error, TypeError):
    """A dtype or row shape that does not fit the variable."""
    kind = "DTYPE"


class MismatchError(Error, ValueError):
    """Ranks disagree in a collective call, or on the job token."""
    kind = "MISMATCH"


class ExistsError(Error, ValueError):
    """The variable exists already."""
    kind = "EXISTS"


class PeerDeadError(Error, ConnectionError):
    """A rank that owns the rows died; .rank names it."""
    kind = "PEER_DEAD"


class ClosedError(Error, ValueError):
    """The store (or loader) is closed."""
    kind = "CLOSED"


class DeadlineError(Error, TimeoutError):
    """An operation did not finish before its deadline."""
    kind = "TIMEOUT"


class InvalidError(Error, ValueError):
    """A bad argument, option or handle, or a launcher environment the
    bootstrap cannot use (among them a rendezvous that another open store
    of this process holds)."""
    kind = "INVALID"


class ForkError(Error, RuntimeError):
    """The store is used in a forked child; only its creator may use it."""


# Code → exception, learned from the library at load (learn_codes): the
# codes are the Go package fault's classes, and each exception above names
# its class by kind; no list of codes is kept here.
_BY_CODE = {}


def learn_codes(name_of):
    """Maps each code the library names (name_of(code) → b"INDEX", ...,
    None for no class) onto the exception whose kind it is."""
    by_kind = {c.kind: c for c in Error.__subclasses__() if getattr(c, "kind", None)}
    for code in range(1, 128):
        name = name_of(code)
        if name and name.decode() in by_kind:
            _BY_CODE[code] = by_kind[name.decode()]
    missing = set(by_kind) - {c.kind for c in _BY_CODE.values()}
    if missing:
        raise Error(0, -1, "libddstore.so names no code for %s: library and package disagree" % ", ".join(sorted(missing)))


def from_code(code, rank, msg):
    return _BY_CODE.get(code, Error)(code, rank, msg)
