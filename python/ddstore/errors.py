"""Exceptions of ddstore. Every one subclasses ddstore.Error and the
builtin exception a Python caller expects for its cause."""

NO_CODE = 0  # .code of an error the library gave no code for


class Error(Exception):
    """Any ddstore error. .code is the C ABI's DDS_ERR_* code of its kind,
    also when Python raises it (see make); NO_CODE where the library gave
    none. .rank is the rank concerned (or -1)."""

    kind = None  # the library's name of its code (dds_error_name)
    python_only = False  # True: the library never returns it (from_code does not map onto it)

    def __init__(self, *args):
        # (code, rank, msg) from the library or make; (msg) when the
        # library is missing, or re-raised by torch's DataLoader from a
        # worker.
        code, rank, msg = args if len(args) == 3 else (NO_CODE, -1, " ".join(map(str, args)))
        super().__init__(msg)
        self.code, self.rank, self.msg = code, rank, msg

    def __str__(self):  # KeyError would print the repr
        return self.msg


def _kind(name, builtin, kind, doc, python_only=False):
    """An Error subclass named name that is also the builtin exception
    builtin, for the library's kind."""
    return type(name, (Error, builtin), {"__doc__": doc, "__module__": __name__, "kind": kind,
                                         "python_only": python_only})


# The exceptions: one row each (name, builtin, kind, doc).
OutOfRangeError = _kind("OutOfRangeError", IndexError, "INDEX",
                        "A row or range outside the variable, or an update outside the shard.")
UnknownVariableError = _kind("UnknownVariableError", KeyError, "UNKNOWN_VAR", "No variable of that name.")
ShortBufferError = _kind("ShortBufferError", ValueError, "SHORT", "A destination too small for the rows asked.")
DTypeError = _kind("DTypeError", TypeError, "DTYPE",
                   "A dtype or row shape that does not fit the variable, or indices, starts, lengths or a "
                   "start that are not integers (a TypeError, as list[1.7] raises).")
MismatchError = _kind("MismatchError", ValueError, "MISMATCH",
                      "Ranks disagree in a collective call, or on the job token.")
ExistsError = _kind("ExistsError", ValueError, "EXISTS", "The variable exists already.")
PeerDeadError = _kind("PeerDeadError", ConnectionError, "PEER_DEAD", "A rank that owns the rows died; .rank names it.")
ClosedError = _kind("ClosedError", ValueError, "CLOSED", "The store (or loader) is closed.")
DeadlineError = _kind("DeadlineError", TimeoutError, "TIMEOUT", "An operation did not finish before its deadline.")
InvalidError = _kind("InvalidError", ValueError, "INVALID",
                     "A bad argument, option or handle, or a launcher environment the bootstrap cannot use "
                     "(among them a rendezvous that another open store of this process holds).")
ForkError = _kind("ForkError", RuntimeError, "INVALID",
                  "The store is used in a forked child; only its creator may use it. Its code is INVALID's "
                  "(an invalid use), but the library's INVALID errors stay InvalidError.", python_only=True)


# Code → exception and kind → code, learned from the library at load
# (learn_codes): the codes are the Go package fault's classes, and each
# exception above names its class by kind; no list of codes is kept here.
_BY_CODE = {}
_CODE_OF_KIND = {}


def learn_codes(name_of):
    """Maps each code the library names (name_of(code) → b"INDEX", ...,
    None for no class) onto the exception whose kind it is."""
    kinds = {c.kind for c in Error.__subclasses__() if c.kind}
    by_kind = {c.kind: c for c in Error.__subclasses__() if c.kind and not c.python_only}
    for code in range(1, 128):
        name = name_of(code)
        if name:
            _CODE_OF_KIND[name.decode()] = code
            if name.decode() in by_kind:
                _BY_CODE[code] = by_kind[name.decode()]
    missing = kinds - set(_CODE_OF_KIND)
    if missing:
        raise Error("libddstore.so names no code for %s: library and package disagree" % ", ".join(sorted(missing)))


def from_code(code, rank, msg):
    return _BY_CODE.get(code, Error)(code, rank, msg)


def make(cls, msg, rank=-1):
    """An exception of class cls raised by Python, with the library's code
    of its kind (loads the library when it is not loaded yet)."""
    if not _CODE_OF_KIND:
        from . import _lib  # loading the library learns the codes
        _lib.lib()
    return cls(_CODE_OF_KIND[cls.kind], rank, msg)
