package bootstrap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// FuzzRendezvousFrame is a round-trip oracle of the tcp rendezvous's
// frames, driven by arbitrary bytes in (its corpus is plain byte strings):
//
//   - in itself, read as a frame (under the handshake cap) and decoded by
//     its type's decoder, must give a clean error or values that encode
//     to exactly the bytes read; read as a dir record, fields that encode
//     to the record's own bytes;
//   - fields drawn from in (seq, tag, blobs) built into a gather, a result
//     and a verdict frame by the encoders must decode to exactly those
//     fields;
//   - each of those frames truncated, with a byte flipped, or with one of
//     its length fields changed (all drawn from in) must give a clean
//     error (always, when truncated) or values that encode to exactly the
//     mutated bytes read. Never a panic.
func FuzzRendezvousFrame(f *testing.F) {
	f.Add(hello{rank: 1, world: 4, token: "t", job: "j", host: "h", pid: 7}.frame())
	f.Add(verdictFrame(fReject, fault.ErrToken, []int{1, 2}, "no"))
	f.Add(resultFrame(1, [][]byte{[]byte("a"), []byte("bc")}))
	f.Add(gatherFrame(9, "fabric-addr", []byte("blob")))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, fHello})
	f.Add((&dirEx{collective: collective{rank: 1, world: 2, seq: 3}, token: "t"}).encode("tag", []byte("blob")))
	f.Add([]byte("\x07\x00\x00\x00\x00\x00\x00\x00round-1\xfeblob of rank 0\xfe\xfeblob of rank 2"))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkFrame(t, in, nil)
		checkDirRecord(t, in)

		seq, tag, blobs := fieldsOf(in)
		k := crc32.ChecksumIEEE(in) // draws the mutations
		var blob []byte
		if len(blobs) > 0 {
			blob = bytes.Join(blobs, []byte{0xfe})
		}

		g := gatherFrame(seq, tag, blob)
		typ, d, err := readFrameMax(bytes.NewReader(g), maxHandshake)
		if err != nil || typ != fGather {
			t.Fatalf("gather frame of %d bytes read back as type %d: %v", len(g), typ, err)
		}
		gs, gt, gb, err := parseGatherFrame(d)
		if err != nil || gs != seq || gt != tag || !bytes.Equal(gb, blob) {
			t.Fatalf("gather(%d, %q, %q) decoded to (%d, %q, %q), %v", seq, tag, blob, gs, gt, gb, err)
		}
		mutate(t, g, k, []int{0, 13, 17 + len(tag)})

		r := resultFrame(seq, blobs)
		typ, d, err = readFrameMax(bytes.NewReader(r), maxHandshake)
		if err != nil || typ != fResult {
			t.Fatalf("result frame of %d bytes read back as type %d: %v", len(r), typ, err)
		}
		rs, rb, err := parseResultFrame(d)
		if err != nil || rs != seq || len(rb) != len(blobs) {
			t.Fatalf("result(%d, %d blobs) decoded to (%d, %d blobs), %v", seq, len(blobs), rs, len(rb), err)
		}
		lens := []int{0, 13} // the frame's length, the blob count
		off := 17
		for i := range blobs {
			if !bytes.Equal(rb[i], blobs[i]) {
				t.Fatalf("result blob %d: %q, encoded %q", i, rb[i], blobs[i])
			}
			lens = append(lens, off)
			off += 4 + len(blobs[i])
		}
		mutate(t, r, k, lens)

		code, ranks := uint8(seq), make([]int, len(blobs))
		for i, b := range blobs {
			ranks[i] = len(b)
		}
		v := verdictCodeFrame(fAbort, code, ranks, tag)
		typ, d, err = readFrameMax(bytes.NewReader(v), maxHandshake)
		if err != nil || typ != fAbort {
			t.Fatalf("verdict frame of %d bytes read back as type %d: %v", len(v), typ, err)
		}
		vc, vr, vd, err := parseVerdictFrame(d)
		if err != nil || vc != code || fmt.Sprint(vr) != fmt.Sprint(ranks) || vd != tag {
			t.Fatalf("verdict(%d, %v, %q) decoded to (%d, %v, %q), %v", code, ranks, tag, vc, vr, vd, err)
		}
		mutate(t, v, k, []int{0, 6, 10 + 4*len(ranks)})
	})
}

// fieldsOf draws a collective's fields from b: seq from the first 8 bytes
// (little-endian, zero-padded), then the tag and the blobs, separated by
// 0xfe.
func fieldsOf(b []byte) (seq uint64, tag string, blobs [][]byte) {
	var s [8]byte
	n := copy(s[:], b)
	parts := bytes.Split(b[n:], []byte{0xfe})
	return binary.LittleEndian.Uint64(s[:]), string(parts[0]), parts[1:]
}

// mutate checks frame truncated, with one byte flipped, and with one of
// the little-endian u32 length fields at lens changed, each drawn from k.
func mutate(t *testing.T, frame []byte, k uint32, lens []int) {
	t.Helper()
	cut := frame[:int(k%uint32(len(frame)))]
	checkFrame(t, cut, frame)

	flip := bytes.Clone(frame)
	flip[int(k>>8)%len(flip)] ^= byte(k>>16) | 1
	checkFrame(t, flip, frame)

	re := bytes.Clone(frame)
	at := lens[int(k>>4)%len(lens)]
	n := binary.LittleEndian.Uint32(re[at:])
	switch k >> 30 {
	case 0:
		n++
	case 1:
		n--
	case 2:
		n = 1 << 30 // a gigabyte announced
	default:
		n ^= k
	}
	binary.LittleEndian.PutUint32(re[at:], n)
	checkFrame(t, re, frame)
}

// checkFrame reads b as one frame under the handshake cap and decodes it:
// a clean error, or values whose encoding is exactly the bytes read. orig,
// when b was made from it by cutting its tail, must fail.
func checkFrame(t *testing.T, b, orig []byte) {
	t.Helper()
	typ, d, err := readFrameMax(bytes.NewReader(b), maxHandshake)
	truncated := orig != nil && len(b) < len(orig) && bytes.Equal(b, orig[:len(b)])
	if err != nil {
		if len(b) >= 4 {
			n := binary.LittleEndian.Uint32(b)
			if n > 0 && n <= maxHandshake && uint64(len(b)-4) >= uint64(n) {
				t.Fatalf("readFrameMax refused a whole frame of %d bytes (%x): %v", n, b, err)
			}
		}
		return
	}
	if truncated {
		t.Fatalf("a frame cut to %d of its %d bytes was read (type %d)", len(b), len(orig), typ)
	}
	read := b[:4+binary.LittleEndian.Uint32(b)]
	if again, got := reencode(typ, d); again != nil && !bytes.Equal(again, read) {
		t.Fatalf("frame %x decoded to %s, which encodes to %x", read, got, again)
	}
}

// reencode decodes the body d of a frame of type typ and encodes what it
// found again: the frame that makes, and the values as showFrame prints
// them; nil for a body that does not decode or a type without one.
func reencode(typ byte, d *dec) (again []byte, got string) {
	switch typ {
	case fHello:
		if h, err := parseHello(d); err == nil {
			return h.frame(), showFrame(typ, h)
		}
	case fGather:
		if seq, tag, blob, err := parseGatherFrame(d); err == nil {
			return gatherFrame(seq, tag, blob), showFrame(typ, seq, tag, blob)
		}
	case fResult:
		if seq, blobs, err := parseResultFrame(d); err == nil {
			return resultFrame(seq, blobs), showFrame(typ, seq, blobs)
		}
	case fReject, fAbort:
		if code, ranks, detail, err := parseVerdictFrame(d); err == nil {
			return verdictCodeFrame(typ, code, ranks, detail), showFrame(typ, code, ranks, detail)
		}
	}
	return nil, ""
}

// showFrame prints a frame's type and fields in Go syntax.
func showFrame(typ byte, fields ...any) string { return fmt.Sprintf("%d %#v", typ, fields) }

// checkDirRecord: a dir record that decodes holds fields that encode to
// exactly the record's bytes: decodeDirFile reads them from the record,
// from nowhere else, and leaves nothing over.
func checkDirRecord(t *testing.T, b []byte) {
	t.Helper()
	rec, err := decodeDirFile(b)
	if err != nil {
		return
	}
	x := &dirEx{collective: collective{rank: rec.rank, world: rec.world, seq: rec.seq}, token: rec.token}
	again := x.encode(rec.tag, rec.blob)
	if !bytes.Equal(again, b) {
		t.Fatalf("dir record %x decoded to %+v, which encodes to %x", b, rec, again)
	}
}
