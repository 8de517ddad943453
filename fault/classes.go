package fault

import "errors"

// Class is one kind of error as the C ABI and the Python package see it:
// a stable code (the C ABI's DDS_ERR_<Name>), a name, and the sentinels
// that belong to it. The C header's codes (python/libddstore/ddstore.h,
// written by `go generate ./python/libddstore`) and the Python exceptions
// (each names its class) are derived from Classes; nothing else lists
// them.
type Class struct {
	Code int
	Name string  // DDS_ERR_<Name> in C; an exception's kind in Python
	Errs []error // the class's own sentinel first
	Doc  string  // one line, for the header
}

// Classes in the order CodeOf tries them: the most specific first (a read
// that timed out on a dead peer is PEER_DEAD; a loader error whose cause is
// a closed store is CLOSED).
var Classes = []Class{
	{8, "CLOSED", []error{ErrClosed}, "store, loader or epoch closed"},
	{7, "PEER_DEAD", []error{ErrPeerDead}, "a rank died; err->rank names it"},
	{9, "TIMEOUT", []error{ErrTimeout}, "deadline passed"},
	{1, "INDEX", []error{ErrIndex}, "row or range outside the variable"},
	{2, "UNKNOWN_VAR", []error{ErrUnknownVar}, "no such variable"},
	{3, "SHORT", []error{ErrShortBuffer}, "destination too small"},
	{4, "DTYPE", []error{ErrDType}, "bad dtype, row size or data length"},
	{5, "MISMATCH", []error{ErrMismatch, ErrToken}, "ranks disagree in a collective, or on the job token"},
	{6, "EXISTS", []error{ErrExists}, "variable exists"},
	{10, "INVALID", []error{ErrInvalid, ErrEnv, ErrTooLarge}, "bad argument, option, handle or launcher environment"},
}

// CodeOther is the code of an error of no class (no libfabric or
// provider, the OS); 0 is no error.
const CodeOther = 99

// CodeOf is the code of err's class: 0 for nil, the first class in
// Classes whose sentinel err matches (errors.Is), else CodeOther.
func CodeOf(err error) int {
	if err == nil {
		return 0
	}
	for _, c := range Classes {
		for _, e := range c.Errs {
			if errors.Is(err, e) {
				return c.Code
			}
		}
	}
	return CodeOther
}

// ClassName is the name of code's class ("INDEX"), "OTHER" for
// CodeOther, "" for an unknown code.
func ClassName(code int) string {
	if code == CodeOther {
		return "OTHER"
	}
	for _, c := range Classes {
		if c.Code == code {
			return c.Name
		}
	}
	return ""
}

// Sentinel returns a package's own sentinel error (its text, for example
// "gpu: closed") that belongs to a class of this package: errors.Is(err,
// class) holds for it and for every error that wraps it, so a caller tests
// one set of classes whichever layer failed.
func Sentinel(text string, class error) error { return &sentinel{text, class} }

type sentinel struct {
	text  string
	class error
}

func (s *sentinel) Error() string        { return s.text }
func (s *sentinel) Is(target error) bool { return target == s.class }
