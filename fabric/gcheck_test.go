package fabric

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatherCheckC builds the C unit tests of the gather request validator
// (testdata/ctest/gcheck_test.c with dd_gcheck.c) and runs them. With
// DDSTORE_ASAN=1 (make test-asan) they are built with AddressSanitizer and
// UndefinedBehaviorSanitizer.
func TestGatherCheckC(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		skipOrRequire(t, "no C compiler (%s) to build the C tests", cc)
	}
	bin := filepath.Join(t.TempDir(), "gcheck")
	args := []string{"-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I.", "testdata/ctest/gcheck_test.c", "dd_gcheck.c", "-o", bin}
	if os.Getenv("DDSTORE_ASAN") == "1" {
		args = append([]string{"-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"}, args...)
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "checks passed") {
		t.Fatalf("C tests failed: %v", err)
	}
}

// encodeGatherRequest is the request layout as Go reads dd_proto.h: header
// {magic, nent u32; id u64; namelen, pad u32; total u64}, the name padded to
// 8 bytes, then {key, addr, len u64} per entry, little-endian.
func encodeGatherRequest(name []byte, id uint64, ents []gatherEnt) []byte {
	b := make([]byte, gatherReqHdr, gatherReqHdr+len(name)+8+len(ents)*gatherEntry)
	binary.LittleEndian.PutUint32(b[0:], 0x51524444)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(ents)))
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(name)))
	var total uint64
	for _, e := range ents {
		total += e.Len
	}
	binary.LittleEndian.PutUint64(b[24:], total)
	b = append(b, name...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint64(b, e.Key)
		b = binary.LittleEndian.AppendUint64(b, e.Addr)
		b = binary.LittleEndian.AppendUint64(b, e.Len)
	}
	return b
}

var fuzzExports = []gatherExport{{Key: 0x10, Base: 0x1000, Size: 1 << 16}, {Key: 0x20, Base: 0, Size: 4096}}

const fuzzMaxBytes = 1 << 20

// entryOK is the Go statement of the bounds rule.
func entryOK(e gatherEnt) bool {
	for _, x := range fuzzExports {
		if x.Key == e.Key {
			return e.Len > 0 && e.Addr >= x.Base && e.Addr-x.Base <= x.Size && e.Len <= x.Size-(e.Addr-x.Base)
		}
	}
	return false
}

// TestGatherRequestLayout: a request encoded by Go from dd_proto.h's layout
// is what the C validator reads (both sides agree on the wire format).
func TestGatherRequestLayout(t *testing.T) {
	ents := []gatherEnt{{0x10, 0x1000, 100}, {0x20, 4000, 96}}
	v := checkGatherRequest(encodeGatherRequest([]byte("endpoint-name-24-bytes!!"), 7, ents), fuzzExports, 24, fuzzMaxBytes)
	if !v.Parsed || v.Status != 0 || v.Total != 196 || len(v.Entries) != 2 || v.Entries[1] != ents[1] {
		t.Fatalf("C read %+v", v)
	}
	v = checkGatherRequest(encodeGatherRequest([]byte("short"), 7, ents), fuzzExports, 24, fuzzMaxBytes)
	if v.Parsed {
		t.Fatal("a name of another length was accepted")
	}
	bad := append(ents, gatherEnt{0x20, 4095, 2})
	v = checkGatherRequest(encodeGatherRequest([]byte("n"), 7, bad), fuzzExports, 0, fuzzMaxBytes)
	if !v.Parsed || v.Status != 22 || v.Bad != 2 {
		t.Fatalf("entry past the region: %+v", v)
	}
}

// framedRequest turns fuzz bytes into a request with valid framing (a
// name of 1-32 bytes, as many entries as raw holds), its entries mostly
// near or inside the exports, so the fuzzer exercises the entry checks
// (it sees no coverage inside C).
func framedRequest(raw []byte) []byte {
	if len(raw) == 0 {
		return encodeGatherRequest([]byte("n"), 0, nil)
	}
	name := make([]byte, int(raw[0])%32+1)
	raw = raw[1:]
	var ents []gatherEnt
	for len(raw) >= 17 && len(ents) < 1100 {
		sel := raw[0]
		key := binary.LittleEndian.Uint64(raw[1:])
		v := binary.LittleEndian.Uint64(raw[9:])
		raw = raw[17:]
		x := fuzzExports[int(sel)%2]
		e := gatherEnt{Key: x.Key, Addr: x.Base + key%(x.Size+32) - 16, Len: v % (x.Size + 64)}
		switch sel >> 5 {
		case 0:
			e.Key = key // anything
		case 1:
			e.Len = v // any length
		case 2:
			e.Addr = key // any address
		}
		ents = append(ents, e)
	}
	return encodeGatherRequest(name, 1, ents)
}

// FuzzGatherRequest feeds arbitrary requests to the target's validator
// (ending at a guard page, so any read past them faults): raw bytes when
// framed is false, else framedRequest(raw). Every verdict is checked
// against the Go statement of the rules: an accepted request has only
// in-bounds entries and a total within the limit; a rejected one names its
// first bad entry.
func FuzzGatherRequest(f *testing.F) {
	name := []byte("0123456789abcdef")
	f.Add(encodeGatherRequest(name, 1, []gatherEnt{{0x10, 0x1000, 100}, {0x20, 4000, 96}}), false)
	f.Add(encodeGatherRequest(name, 2, []gatherEnt{{0x10, 0x1000 + 1<<16 - 4, 5}}), false)
	f.Add(encodeGatherRequest(name, 3, []gatherEnt{{0x99, 0, 1}}), false)
	f.Add(encodeGatherRequest(name, 4, []gatherEnt{{0x10, 0x1001, ^uint64(0)}}), false)
	f.Add(encodeGatherRequest(name, 5, nil), false)
	f.Add([]byte{}, false)
	f.Add([]byte("\x05abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP"), true)
	f.Fuzz(func(t *testing.T, req []byte, framed bool) {
		if framed {
			req = framedRequest(req)
		}
		v := checkGatherRequest(req, fuzzExports, 0, fuzzMaxBytes)
		if !v.Parsed {
			if framed && len(req) <= gatherReqHdr+40+maxGatherEntries*gatherEntry {
				t.Fatalf("well-framed request of %d bytes dropped", len(req))
			}
			return
		}
		var sum uint64
		for i, e := range v.Entries {
			ok := entryOK(e) && e.Len <= fuzzMaxBytes-sum
			switch {
			case v.Status == 0 && !ok:
				t.Fatalf("accepted entry %d %+v out of bounds (total %d)", i, e, sum)
			case v.Status != 0 && uint32(i) < v.Bad && !ok:
				t.Fatalf("entry %d %+v bad but %d named", i, e, v.Bad)
			case v.Status != 0 && uint32(i) == v.Bad && ok:
				t.Fatalf("entry %d %+v named bad but fine", i, e)
			}
			if v.Status != 0 && uint32(i) == v.Bad {
				return
			}
			sum += e.Len
		}
		if v.Status != 0 {
			t.Fatalf("rejected (%d) naming entry %d of %d", v.Status, v.Bad, len(v.Entries))
		}
		if sum != v.Total {
			t.Fatalf("total %d, entries sum to %d", v.Total, sum)
		}
	})
}
