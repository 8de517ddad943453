package engine

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckLoopback: a loopback fabric address offered across hosts is an
// Open error naming both ranks, both hosts, the interface and the key;
// loopback between ranks of one machine is fine.
func TestCheckLoopback(t *testing.T) {
	peers := []peerInfo{
		{Host: "n1", BootID: "a"}, {Host: "n1", BootID: "a"},
		{Host: "n2", BootID: "b"}, {Host: "n2", BootID: "b"},
	}
	all := func(r int) []int { return []int{0, 1, 2, 3} }
	lo, eth := fabricIface{Name: "lo", Loopback: true}, fabricIface{Name: "eth0"}
	if err := checkLoopback(peers, []fabricIface{eth, eth, eth, eth}, all); err != nil {
		t.Fatalf("all on eth0: %v", err)
	}
	// Loopback on one machine only reaches that machine's ranks.
	if err := checkLoopback(peers[:2], []fabricIface{lo, lo}, func(int) []int { return []int{0, 1} }); err != nil {
		t.Fatalf("one machine on lo: %v", err)
	}
	err := checkLoopback(peers, []fabricIface{eth, eth, lo, eth}, all)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("rank 2 on lo: %v", err)
	}
	for _, want := range []string{"rank 2 on n2", `"lo"`, "rank 0 on n1", "FABRIC_IFACE", "fabric.iface"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	// Only pairs that read each other through the fabric count.
	none := func(r int) []int { return nil }
	if err := checkLoopback(peers, []fabricIface{eth, eth, lo, eth}, none); err != nil {
		t.Fatalf("no fabric pairs: %v", err)
	}
}

// FuzzAddrRecord: a round-2 record built from the fuzzer's fields decodes
// to exactly those fields (the error text cut at maxRecordErr, the name at
// 255 bytes); a record cut short or with a bad flag byte is a clean error,
// and any other bytes either fail cleanly or decode to fields that encode
// back to the same bytes.
func FuzzAddrRecord(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4}, "lo", true, "", 0)
	f.Add([]byte(nil), "eth0", false, "fabric: no provider tcp", 7)
	f.Add(make([]byte, 64), strings.Repeat("n", 300), false, strings.Repeat("e", 5000), 3)
	f.Fuzz(func(t *testing.T, addr []byte, name string, lo bool, why string, cut int) {
		var failed error
		if why != "" {
			failed = errors.New(why)
		}
		b := encodeAddrRecord(addr, fabricIface{Name: name, Loopback: lo}, failed)
		gotAddr, gotIface, gotWhy, err := decodeAddrRecord(b)
		if err != nil {
			t.Fatalf("decode of a whole record: %v", err)
		}
		wantName, wantWhy := name[:min(len(name), 255)], why[:min(len(why), maxRecordErr)]
		if string(gotAddr) != string(addr) || gotIface != (fabricIface{Name: wantName, Loopback: lo}) || gotWhy != wantWhy {
			t.Fatalf("round trip: %x %+v %q, want %x %q %v %q", gotAddr, gotIface, gotWhy, addr, wantName, lo, wantWhy)
		}
		head := 4 + len(wantName) + len(wantWhy)
		if cut = cut % (head + 1); cut < 0 {
			cut = -cut
		}
		if cut < head { // cut inside the header, name or error text
			if _, _, _, err := decodeAddrRecord(b[:cut]); err == nil {
				t.Fatalf("record cut to %d of %d header bytes decoded", cut, head)
			}
		}
		bad := append([]byte(nil), b...)
		bad[0] = 2
		if _, _, _, err := decodeAddrRecord(bad); err == nil {
			t.Fatal("flag byte 2 decoded")
		}
		// Arbitrary bytes: an error, or fields that encode back to them.
		raw := append(append([]byte(nil), why...), addr...)
		a, ifc, w, err := decodeAddrRecord(raw)
		if err == nil {
			var e error
			if w != "" {
				e = errors.New(w)
			}
			if back := encodeAddrRecord(a, ifc, e); string(back) != string(raw) {
				t.Fatalf("%x decoded to %x %+v %q, which encodes to %x", raw, a, ifc, w, back)
			}
		}
	})
}
