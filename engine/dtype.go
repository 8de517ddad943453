package engine

import (
	"fmt"
	"strings"
)

// DType is the element type of a variable's rows.
type DType uint8

// Element types. Bytes is raw bytes (element size 1, no interpretation).
const (
	Int32 DType = iota + 1
	Int64
	Uint8
	Float32
	Float64
	Bool
	Bytes
)

var dtypeNames = [...]string{Int32: "int32", Int64: "int64", Uint8: "uint8",
	Float32: "float32", Float64: "float64", Bool: "bool", Bytes: "bytes"}

var dtypeSizes = [...]int{Int32: 4, Int64: 8, Uint8: 1, Float32: 4, Float64: 8, Bool: 1, Bytes: 1}

// Valid reports whether d is one of the defined types.
func (d DType) Valid() bool { return d >= Int32 && d <= Bytes }

// Size is the element size in bytes (0 for an invalid type).
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

// String is the type's name ("int32", ..., "bytes").
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeNames[d]
}

// ParseDType parses a name as printed by String ("raw" is accepted for bytes).
func ParseDType(s string) (DType, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "raw" {
		return Bytes, nil
	}
	for d := Int32; d <= Bytes; d++ {
		if dtypeNames[d] == s {
			return d, nil
		}
	}
	return 0, errf(ErrDType, "ParseDType", "", "unknown dtype %q", s)
}
