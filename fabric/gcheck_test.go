package fabric

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ddstore/ddstore/internal/testkit"
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

// The gather wire format as these tests write it down from dd_proto.h's
// comments, independently of the C structs: little-endian; a request is a
// 40-byte header {magic "DDRQ" u32, nent u32, id u64, namelen u32, pad
// u32, total u64, gkey u64}, the endpoint name padded to 8 bytes, then nent entries
// {key, addr, len u64}; a reply is a 32-byte header {magic "DDRP" u32,
// status i32, id u64, bytes u64, textlen u32, entry u32}, then the rows
// (status 0) or textlen bytes of text ending in a NUL.
const (
	wireReqMagic = 0x51524444
	wireRepMagic = 0x50524444
	wireReqHdr   = 40
	wireKeyOff   = 32 // the gather key in a request header
	wireEntry    = 24
	wireRepHdr   = 32
	wireMaxEnt   = 1024
	wireMaxName  = 256
	wireMaxBytes = 64 << 20
	fiEINVAL     = 22
	fiEMSGSIZE   = 90
	fiEIO        = 5
)

func encodeGatherRequest(name []byte, id, gkey uint64, ents []gatherEnt) []byte {
	b := make([]byte, wireReqHdr, wireReqHdr+len(name)+8+len(ents)*wireEntry)
	binary.LittleEndian.PutUint32(b[0:], wireReqMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(ents)))
	binary.LittleEndian.PutUint64(b[8:], id)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(name)))
	var total uint64
	for _, e := range ents {
		total += e.Len
	}
	binary.LittleEndian.PutUint64(b[24:], total)
	binary.LittleEndian.PutUint64(b[wireKeyOff:], gkey)
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

type wireReply struct {
	Magic          uint32
	Status         int32
	ID, Bytes      uint64
	TextLen, Entry uint32
}

func encodeGatherReply(h wireReply) []byte {
	b := binary.LittleEndian.AppendUint32(nil, h.Magic)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.Status))
	b = binary.LittleEndian.AppendUint64(b, h.ID)
	b = binary.LittleEndian.AppendUint64(b, h.Bytes)
	b = binary.LittleEndian.AppendUint32(b, h.TextLen)
	return binary.LittleEndian.AppendUint32(b, h.Entry)
}

func decodeGatherReply(b []byte) wireReply {
	return wireReply{Magic: binary.LittleEndian.Uint32(b), Status: int32(binary.LittleEndian.Uint32(b[4:])),
		ID: binary.LittleEndian.Uint64(b[8:]), Bytes: binary.LittleEndian.Uint64(b[16:]),
		TextLen: binary.LittleEndian.Uint32(b[24:]), Entry: binary.LittleEndian.Uint32(b[28:])}
}

// TestGatherWire checks the C halves of the protocol against the format
// written down above: the target parses a request Go encoded and answers
// with a reply Go decodes to the exported bytes; a request with another
// gather key is a stranger's, dropped, and a target without a key (0)
// checks none; the limits the C enforces
// (found by probing it) are the ones dd_proto.h documents and Go
// validates options against.
func TestGatherWire(t *testing.T) {
	if gatherReqHdr != wireReqHdr || gatherEntry != wireEntry || gatherRepHdr != wireRepHdr {
		t.Fatalf("C structs: request header %d, entry %d, reply header %d bytes; the wire format says %d, %d, %d",
			gatherReqHdr, gatherEntry, gatherRepHdr, wireReqHdr, wireEntry, wireRepHdr)
	}
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	exports := []gatherExport{{Key: 0x10, Base: 0x1000, Size: 1 << 16}, {Key: 0x20, Base: 0, Size: 4096, Data: data}}
	ents := []gatherEnt{{0x10, 0x1000, 100}, {0x20, 4000, 96}, {0x20, 8, 5}}
	const key = 0x5ca1ab1e0ddba11
	v := checkGatherRequest(encodeGatherRequest([]byte("endpoint-name-24-bytes!!"), 7, key, ents), exports, 24, key, 1<<20)
	if !v.Parsed || v.Status != 0 || v.Total != 201 || fmt.Sprint(v.Entries) != fmt.Sprint(ents) {
		t.Fatalf("C read %+v", v)
	}
	want := encodeGatherReply(wireReply{Magic: wireRepMagic, ID: 7, Bytes: 201})
	want = append(want, make([]byte, 100)...)
	want = append(append(want, data[4000:4096]...), data[8:13]...)
	if !bytes.Equal(v.Reply, want) {
		t.Fatalf("reply %x\nwant  %x", v.Reply, want)
	}
	if v = checkGatherRequest(encodeGatherRequest([]byte("short"), 7, key, ents), exports, 24, key, 1<<20); v.Parsed || v.Stranger {
		t.Fatalf("a name of another length: %+v", v)
	}
	for _, other := range []uint64{0, key ^ 1, key ^ 1<<63, ^uint64(key)} {
		if v = checkGatherRequest(encodeGatherRequest([]byte("endpoint-name-24-bytes!!"), 7, other, ents), exports, 24, key, 1<<20); v.Parsed || !v.Stranger || v.Reply != nil {
			t.Fatalf("key %#x at a target with key %#x: %+v, want a stranger's request dropped", other, uint64(key), v)
		}
		if v = checkGatherRequest(encodeGatherRequest([]byte("endpoint-name-24-bytes!!"), 7, other, ents), exports, 24, 0, 1<<20); !v.Parsed || v.Status != 0 {
			t.Fatalf("key %#x at a target without a key: %+v, want it answered", other, v)
		}
	}
	bad := append(ents, gatherEnt{0x20, 4095, 2})
	v = checkGatherRequest(encodeGatherRequest([]byte("n"), 9, key, bad), exports, 0, key, 1<<20)
	h := decodeGatherReply(v.Reply)
	text := v.Reply[wireRepHdr:]
	if !v.Parsed || h != (wireReply{Magic: wireRepMagic, Status: fiEINVAL, ID: 9, TextLen: uint32(len(text)), Entry: 3}) ||
		!bytes.HasPrefix(text, []byte("entry 3: 2 bytes at address 0xfff outside region key 0x20")) || text[len(text)-1] != 0 {
		t.Fatalf("entry past the region: %+v %q", h, text)
	}
	// The limits, probed: the most entries and the longest name a request
	// may have, and the largest reply (the target's own limit is
	// DD_GMAX_BYTES; Go's options are checked against maxGatherBytes).
	one := []gatherEnt{{0x10, 0x1000, 1}}
	probe := func(nent, namelen int) bool {
		return checkGatherRequest(encodeGatherRequest(make([]byte, namelen), 1, key, slicesRepeat(one, nent)), exports, 0, key, 1<<20).Parsed
	}
	if !probe(wireMaxEnt, 8) || probe(wireMaxEnt+1, 8) || !probe(1, wireMaxName) || probe(1, wireMaxName+1) || probe(1, 0) {
		t.Fatalf("C framing limits differ from %d entries, names of 1-%d bytes", wireMaxEnt, wireMaxName)
	}
	if maxGatherEntries != wireMaxEnt || maxGatherName != wireMaxName || maxGatherBytes != wireMaxBytes {
		t.Fatalf("Go's limits %d entries, %d name bytes, %d reply bytes; the protocol's %d, %d, %d",
			maxGatherEntries, maxGatherName, maxGatherBytes, wireMaxEnt, wireMaxName, wireMaxBytes)
	}
	big := []gatherEnt{{0x10, 0x1000, 1 << 16}}
	at := checkGatherRequest(encodeGatherRequest([]byte("n"), 1, key, slicesRepeat(big, 3)), exports, 0, key, 3<<16)
	over := checkGatherRequest(encodeGatherRequest([]byte("n"), 1, key, append(slicesRepeat(big, 3), one[0])), exports, 0, key, 3<<16)
	if at.Status != 0 || over.Status != fiEMSGSIZE || over.Bad != 3 {
		t.Fatalf("reply limit 3<<16: exactly at it %+v, one byte over %+v", at.Status, over)
	}
	if err := (Options{GatherMaxBytes: wireMaxBytes}).Validate(); err != nil {
		t.Fatalf("GatherMaxBytes at the protocol's limit rejected: %v", err)
	}
	if err := (Options{GatherMaxBytes: wireMaxBytes + 1}).Validate(); err == nil {
		t.Fatal("GatherMaxBytes above the protocol's limit accepted")
	}
}

func slicesRepeat(e []gatherEnt, n int) []gatherEnt {
	out := make([]gatherEnt, 0, n)
	for range n {
		out = append(out, e...)
	}
	return out
}

// applyMutations is testkit.Mutate with cuts of 8 bytes.
func applyMutations(b, muts []byte) []byte { return testkit.Mutate(b, muts, 8) }

// gatherLayout is a random set of exports: 1-4 regions of 1 B-8 KiB with
// distinct keys, at address 0, anywhere, or at the top of the address
// space (where base+len overflows 64 bits), holding random bytes.
func gatherLayout(rng *rand.Rand) []gatherExport {
	ex := make([]gatherExport, 1+rng.IntN(4))
	for i := range ex {
		size := 1 + rng.Uint64N(8192)
		e := gatherExport{Key: uint64(i+1)*0x10 + rng.Uint64N(2)<<40, Size: size, Data: make([]byte, size)}
		switch rng.IntN(3) {
		case 0:
		case 1:
			e.Base = rng.Uint64N(1<<63) &^ 7
		case 2:
			e.Base = -size - rng.Uint64N(64)
		}
		for j := range e.Data {
			e.Data[j] = byte(rng.Uint32())
		}
		ex[i] = e
	}
	return ex
}

// gatherModel is what a target with gather key gkey must answer to req,
// from the protocol's definition: nil when it is not a request (no magic)
// or carries another key than a non-zero gkey (stranger: dropped, and
// counted), or its framing is wrong (dropped); else the
// reply: the rows the entries name, copied from the exports' bytes, or a
// rejection of the first entry that names no export, a range not wholly
// inside its export (computed in 128 bits), or pushes the reply past
// maxBytes. reason is the start of the rejection's text.
func gatherModel(req []byte, ex []gatherExport, wantName uint32, gkey, maxBytes uint64) (reply []byte, reason string, stranger bool) {
	le := binary.LittleEndian
	if len(req) < wireReqHdr || le.Uint32(req) != wireReqMagic {
		return nil, "", false
	}
	if gkey != 0 && le.Uint64(req[wireKeyOff:]) != gkey {
		return nil, "", true
	}
	nent, id, namelen := le.Uint32(req[4:]), le.Uint64(req[8:]), le.Uint32(req[16:])
	if namelen == 0 || namelen > wireMaxName || (wantName != 0 && namelen != wantName) || nent > wireMaxEnt {
		return nil, "", false
	}
	pad := (int(namelen) + 7) / 8 * 8
	if len(req) != wireReqHdr+pad+int(nent)*wireEntry {
		return nil, "", false
	}
	var rows []byte
	var sum uint64
	for i := range int(nent) {
		e := req[wireReqHdr+pad+i*wireEntry:]
		key, addr, n := le.Uint64(e), le.Uint64(e[8:]), le.Uint64(e[16:])
		var r *gatherExport
		for j := range ex {
			if ex[j].Key == key {
				r = &ex[j]
				break
			}
		}
		status, why := 0, ""
		switch {
		case r == nil:
			status, why = fiEINVAL, fmt.Sprintf("entry %d: no exported region with key %s", i, cHex(key))
		default:
			end, endHi := bits.Add64(addr, n, 0) // 128-bit ends: no wrap
			rEnd, rEndHi := bits.Add64(r.Base, r.Size, 0)
			if n == 0 || addr < r.Base || endHi > rEndHi || (endHi == rEndHi && end > rEnd) {
				status, why = fiEINVAL, fmt.Sprintf("entry %d: %d bytes at address %s outside region key %s", i, n, cHex(addr), cHex(key))
			} else if sum+n > maxBytes {
				status, why = fiEMSGSIZE, fmt.Sprintf("entry %d: reply exceeds the target's limit of %d bytes", i, maxBytes)
			}
		}
		if status != 0 {
			return encodeGatherReply(wireReply{Magic: wireRepMagic, Status: int32(status), ID: id, Entry: uint32(i)}), why, false
		}
		rows = append(rows, r.Data[addr-r.Base:addr-r.Base+n]...)
		sum += n
	}
	return append(encodeGatherReply(wireReply{Magic: wireRepMagic, ID: id, Bytes: sum}), rows...), "", false
}

// cHex is C's %#llx: 0 has no 0x.
func cHex(v uint64) string {
	if v == 0 {
		return "0"
	}
	return fmt.Sprintf("%#x", v)
}

// framedGatherRequest builds a request from fuzz bytes against ex: a name
// of 1-32 bytes, then one entry per 9 bytes {sel u8, v u64}: most lie
// inside an export (so a valid request is common), the rest name any key,
// address or length, or lie at the edges of an export.
func framedGatherRequest(id, gkey uint64, ex []gatherExport, raw []byte) []byte {
	if len(raw) == 0 {
		return encodeGatherRequest([]byte("n"), id, gkey, nil)
	}
	name := bytes.Repeat([]byte{raw[0]}, int(raw[0])%32+1)
	raw = raw[1:]
	var ents []gatherEnt
	for ; len(raw) >= 9 && len(ents) < wireMaxEnt+8; raw = raw[9:] {
		sel, v := raw[0], binary.LittleEndian.Uint64(raw[1:])
		x := ex[int(sel>>3)%len(ex)]
		off := v % x.Size
		e := gatherEnt{Key: x.Key, Addr: x.Base + off, Len: 1 + (v>>32)%(x.Size-off)}
		switch sel % 8 {
		case 4: // at the region's end: fits exactly, or 1-3 bytes past it
			e.Len = x.Size - off + uint64(sel>>6)
		case 5:
			e.Key = v
		case 6: // just below the region, or starting at or past its end
			e.Addr = x.Base + x.Size + v%4
			if v&8 != 0 {
				e.Addr = x.Base - 1 - v%4
			}
		case 7:
			e.Len = v
		}
		ents = append(ents, e)
	}
	return encodeGatherRequest(name, id, gkey, ents)
}

// FuzzGatherRequest is the target's side of gather against a model: a
// random export layout and gather keys (from seed: the target's is the
// job's or 0, the request's the job's or a stranger's), a request built
// from ents (valid framing, entries mostly inside the exports), then
// mutated by muts (applyMutations); the C validator and reply builder
// (ending at guard pages, so a read or write past any buffer faults) must
// drop exactly the requests the model drops, call strangers exactly the
// model's, and answer the others with exactly the model's reply: the
// exported bytes the entries name, or a rejection naming the model's first
// bad entry.
func FuzzGatherRequest(f *testing.F) {
	f.Add(uint64(1), []byte("\x05\x00abcdefgh\x08ijklmnop\x10qrstuvwx"), []byte{})
	f.Add(uint64(2), []byte("\x05\x05abcdefgh\x0eijklmnop\x0fqrstuvwx"), []byte{})
	f.Add(uint64(3), []byte("\x05\x00abcdefgh"), []byte{8, 0, 0x40})
	f.Add(uint64(4), []byte("\x05\x00abcdefgh"), []byte{0, 0, 1})
	f.Add(uint64(5), []byte{}, []byte{3})
	f.Add(uint64(6), bytes.Repeat([]byte("\x01\x00abcdefgh"), 300), []byte{})
	f.Add(uint64(7), []byte("\x05\x00abcdefgh"), []byte{32, 0, 0x01})    // the key's low bit
	f.Add(uint64(8), []byte("\x05\x00abcdefgh"), []byte{39, 0, 0x80, 4}) // the key's top bit, cut into the entries
	f.Fuzz(func(t *testing.T, seed uint64, ents, muts []byte) {
		rng := rand.New(rand.NewPCG(seed, seed>>17))
		ex := gatherLayout(rng)
		maxBytes := uint64(1 << 20)
		if rng.IntN(2) == 0 {
			maxBytes = 1 + rng.Uint64N(16384)
		}
		id, job := rng.Uint64(), rng.Uint64()
		tkey, rkey := job, job
		switch rng.IntN(8) {
		case 0:
			tkey = 0 // a target that checks nothing
		case 1:
			rkey = 0 // a stranger without a key
		case 2:
			rkey = job ^ 1<<rng.IntN(64) // one bit off
		case 3:
			rkey = rng.Uint64()
		}
		req := applyMutations(framedGatherRequest(id, rkey, ex, ents), muts)
		var wantName uint32
		if rng.IntN(2) == 0 && len(ents) > 0 {
			wantName = uint32(ents[0])%32 + 1
		}
		want, why, stranger := gatherModel(req, ex, wantName, tkey, maxBytes)
		v := checkGatherRequest(req, ex, wantName, tkey, maxBytes)
		if v.Parsed != (want != nil) || v.Stranger != stranger {
			t.Fatalf("C parsed %v (stranger %v) a request the model parses %v (stranger %v) (%d bytes)",
				v.Parsed, v.Stranger, want != nil, stranger, len(req))
		}
		if want == nil {
			return
		}
		if why == "" {
			if !bytes.Equal(v.Reply, want) {
				t.Fatalf("reply of %d bytes (status %d, entry %d), the model's %d bytes differ", len(v.Reply), v.Status, v.Bad, len(want))
			}
			return
		}
		if len(v.Reply) < wireRepHdr || !bytes.Equal(v.Reply[:24], want[:24]) || !bytes.Equal(v.Reply[28:32], want[28:32]) {
			t.Fatalf("rejection %x, the model's %x (%s)", v.Reply[:min(32, len(v.Reply))], want, why)
		}
		text := v.Reply[wireRepHdr:]
		if h := decodeGatherReply(v.Reply); int(h.TextLen) != len(text) || h.TextLen > ddGtext || text[len(text)-1] != 0 ||
			bytes.IndexByte(text, 0) != len(text)-1 || !strings.HasPrefix(string(text), why) {
			t.Fatalf("rejection text %q (textlen %d), want it to start %q", text, h.TextLen, why)
		}
	})
}

// replyModel is what a reader must make of a reply (hdr, then buf: what
// its receive buffer holds after the header) to a round of ops with lens,
// asked with id: the rows split from buf in request order, or an error
// (stage, err, the op blamed in request order, text).
func replyModel(hdr, buf []byte, id uint64, lens []uint64) (ok bool, stage, err, blame int, text string) {
	h := decodeGatherReply(hdr)
	var sum uint64
	for _, l := range lens {
		sum += l
	}
	switch {
	case h.Magic != wireRepMagic || h.ID != id:
		return false, ddBadreply, fiEIO, 0, fmt.Sprintf("malformed reply (magic %s, id %d, want %d)", cHex(uint64(h.Magic)), h.ID, id)
	case h.Status != 0:
		e := int(h.Entry)
		if h.Entry >= uint32(len(lens)) {
			e = 0
		}
		t := buf[:min(int(h.TextLen), ddGtext)]
		if i := bytes.IndexByte(t, 0); i >= 0 {
			t = t[:i]
		}
		return false, ddReject, int(h.Status), e, string(t)
	case h.Bytes != sum:
		return false, ddBadreply, fiEIO, 0, fmt.Sprintf("reply of %d bytes, want %d", h.Bytes, sum)
	}
	return true, 0, 0, 0, ""
}

// FuzzGatherReply is the reader's side of gather against a model: a round
// of 1-64 ops of random lengths (from seed), the reply a target sends for
// it (rows, or a rejection with text), mutated by muts (applyMutations over
// header and payload); the C reply check must fail cleanly (the model's
// stage, status and blamed op, no destination written, no op marked
// done) or deliver exactly the rows the payload holds, each to its op's
// destination and nowhere else (fenced, guard page after the buffers).
func FuzzGatherReply(f *testing.F) {
	f.Add(uint64(1), uint8(3), []byte{}, false)
	f.Add(uint64(2), uint8(40), []byte{}, true)
	f.Add(uint64(3), uint8(5), []byte{}, false)
	f.Add(uint64(4), uint8(1), []byte{0, 0, 1}, false)
	f.Add(uint64(5), uint8(1), []byte{8, 0, 1}, false)
	f.Add(uint64(6), uint8(9), []byte{4, 0, 0x80}, false)
	f.Add(uint64(7), uint8(2), []byte{24, 0, 0xff, 7}, false)
	f.Fuzz(func(t *testing.T, seed uint64, nops uint8, muts []byte, direct bool) {
		rng := rand.New(rand.NewPCG(seed, seed>>17))
		lens := make([]uint64, 1+int(nops)%64)
		var sum uint64
		for i := range lens {
			lens[i] = 1 + rng.Uint64N(1+rng.Uint64N(600))
			sum += lens[i]
		}
		id := rng.Uint64() & (1<<48 - 1)
		h := wireReply{Magic: wireRepMagic, ID: id, Bytes: sum}
		var payload []byte
		if seed%3 == 2 { // a rejection
			payload = []byte(fmt.Sprintf("entry %d: no exported region with key %#x", rng.IntN(len(lens)), rng.Uint64()))
			payload = append(payload[:min(len(payload), ddGtext-1)], 0)
			h = wireReply{Magic: wireRepMagic, Status: fiEINVAL, ID: id, TextLen: uint32(len(payload)), Entry: uint32(rng.IntN(len(lens)))}
		} else {
			payload = make([]byte, sum)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
		}
		msg := applyMutations(append(encodeGatherReply(h), payload...), muts)
		if len(msg) < wireRepHdr {
			msg = append(msg, make([]byte, wireRepHdr-len(msg))...)
		}
		hdr := msg[:wireRepHdr]
		buf := make([]byte, max(sum, ddGtext)) // the reader's buffer after the header
		copy(buf, msg[wireRepHdr:])
		doneT := rng.Uint32()
		v := takeGatherReply(hdr, buf, id, lens, direct, doneT)
		ok, stage, errno, blame, text := replyModel(hdr, buf, id, lens)
		if !v.Fenced {
			t.Fatal("a byte between the destinations was written")
		}
		if v.OK != ok {
			t.Fatalf("reader accepted %v a reply the model accepts %v (%+v)", v.OK, ok, decodeGatherReply(hdr))
		}
		var off uint64
		for k, l := range lens {
			want := bytes.Repeat([]byte{0xA5}, int(l))
			if ok && !direct {
				want = buf[off : off+l]
			}
			off += l
			if !bytes.Equal(v.Rows[k], want) {
				t.Fatalf("op %d of %d: destination holds %x, want %x", k, len(lens), v.Rows[k][:min(16, int(l))], want[:min(16, int(l))])
			}
			if v.Done[k] != ok || (ok && v.DoneT[k] != doneT) {
				t.Fatalf("op %d: done %v at %d, want %v at %d", k, v.Done[k], v.DoneT[k], ok, doneT)
			}
		}
		if ok {
			if v.NDone != len(lens) {
				t.Fatalf("res.done %d after a round of %d", v.NDone, len(lens))
			}
			return
		}
		if v.Stage != stage || v.Err != errno || v.Failed != len(lens)-1-blame || v.Text != text || v.NDone != 0 {
			t.Fatalf("reader: stage %d err %d op %d %q done %d; model: stage %d err %d op %d %q",
				v.Stage, v.Err, v.Failed, v.Text, v.NDone, stage, errno, len(lens)-1-blame, text)
		}
	})
}
