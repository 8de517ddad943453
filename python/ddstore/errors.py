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


class UnknownVariableError(Error, KeyError):
    """No variable of that name."""


class ShortBufferError(Error, ValueError):
    """A destination too small for the rows asked."""


class DTypeError(Error, TypeError):
    """A dtype or row shape that does not fit the variable."""


class MismatchError(Error, ValueError):
    """Ranks disagree in a collective call, or on the job token."""


class ExistsError(Error, ValueError):
    """The variable exists already."""


class PeerDeadError(Error, ConnectionError):
    """A rank that owns the rows died; .rank names it."""


class ClosedError(Error, ValueError):
    """The store (or loader) is closed."""


class DeadlineError(Error, TimeoutError):
    """An operation did not finish before its deadline."""


class InvalidError(Error, ValueError):
    """A bad argument, option or handle, or a launcher environment the
    bootstrap cannot use (among them a rendezvous that another open store
    of this process holds)."""


class ForkError(Error, RuntimeError):
    """The store is used in a forked child; only its creator may use it."""


_BY_CODE = {1: OutOfRangeError, 2: UnknownVariableError, 3: ShortBufferError, 4: DTypeError,
            5: MismatchError, 6: ExistsError, 7: PeerDeadError, 8: ClosedError,
            9: DeadlineError, 10: InvalidError}


def from_code(code, rank, msg):
    return _BY_CODE.get(code, Error)(code, rank, msg)
