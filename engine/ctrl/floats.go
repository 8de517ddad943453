package ctrl

// float32 vectors on the wire: their bytes, a view of received bytes, and
// the element-wise sum in a fixed order.

import (
	"encoding/binary"
	"unsafe"
)

// addInto adds the float32s of b to acc element-wise: acc + b, or b + acc
// when bFirst (the lower-ranked part comes first).
func addInto(acc []float32, b []byte, bFirst bool) {
	in := f32view(b)
	if bFirst {
		for i := range acc {
			acc[i] = in[i] + acc[i]
		}
		return
	}
	for i := range acc {
		acc[i] += in[i]
	}
}

var littleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

// f32bytes is x's memory (the wire is little-endian: see f32view).
func f32bytes(x []float32) []byte {
	if len(x) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}

// f32view reads b as float32s: in place when aligned on a little-endian
// machine, else as a decoded copy.
func f32view(b []byte) []float32 {
	if len(b) < 4 {
		return nil
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		u := binary.LittleEndian.Uint32(b[4*i:])
		out[i] = *(*float32)(unsafe.Pointer(&u))
	}
	return out
}
