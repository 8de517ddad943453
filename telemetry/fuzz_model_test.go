package telemetry

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// telModel is what a segment must show after a sequence of Record calls,
// kept by the test from the calls alone: per (variable, stripe) sums, the
// histogram of call times by the documented bucket rule, per-rank peer
// sums and the last records of the ring.
type telModel struct {
	stripes map[[2]int]*Counters
	peers   map[int]*PeerCounters
	ring    []Call
}

// histBucket is NumBuckets' definition: 0 holds 0; i holds [2^(i-1), 2^i);
// the last everything above.
func histBucket(v int64) int {
	i := 0
	for lim := int64(1); i < NumBuckets-1 && v >= lim; lim *= 2 {
		i++
	}
	return i
}

// fuzzCall is call k from op (4 bytes): variable, reader, rows, flags.
func fuzzCall(op []byte, rowBytes [2]int64) Call {
	v, r := int32(op[0]%2), int32(op[0]>>1%3)
	rows := int64(binary.LittleEndian.Uint16(op[1:])) + 1
	fl := int64(op[3])
	c := Call{Var: v, Reader: r, Rows: rows, Bytes: rows * rowBytes[v], LocalRows: rows / 3, RemoteRows: rows - rows/3,
		Err: fl&1 != 0, MRRegs: fl % 5, Failovers: fl % 3, EndNano: 1}
	c.Targets.Add(int(fl%6), rows)
	for p := range c.Phases {
		c.Phases[p] = rows*int64(p+1)*7 + fl<<uint(p%8)
	}
	return c
}

// FuzzTelemetryModel: a writer records calls built from ops (2 variables,
// readers 0-2 over 2 stripes, so reader 2 folds into stripe 1; 6 target
// ranks; reader 0's calls in its 4-record lane ring, the others in the
// 8-record shared ring, both wrapping) and read back. The file cut short
// by cut (1-63) words must be refused with ErrTruncated; the whole one
// must show exactly the model: every stripe's counters and
// histograms, the peer table and each ring's last records, merged in
// call order (end times increase), the rest counted lost.
func FuzzTelemetryModel(f *testing.F) {
	f.Add([]byte{0, 1, 0, 0}, uint16(0))
	f.Add([]byte{0, 9, 0, 1, 3, 200, 1, 6, 5, 0, 0, 255, 4, 7, 7, 2}, uint16(0))
	f.Add([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"), uint16(0))
	f.Add([]byte{1, 2, 3, 4}, uint16(3))
	dir := f.TempDir()
	recs := make([]Record, 16)
	rowBytes := [2]int64{8, 24}
	// One writer and one mapping per fuzzing process (creating a segment
	// per input would be 30 times slower): each input starts with its two
	// variables removed and added again (their counters zeroed), reads the
	// ring from its own first record and the peer table as a difference.
	w, err := Create(WriterOptions{Dir: dir, Job: "model", Rank: 0, World: 6, MaxVars: 2, MaxReaders: 2, RingSize: 8,
		LaneRingSize: 4, Provider: "tcp", ReaderMode: "thread", Method: "dir"})
	if err != nil {
		f.Fatal(err)
	}
	defer w.Close()
	if err := os.Mkdir(filepath.Join(dir, "cut"), 0o700); err != nil {
		f.Fatal(err)
	}
	seg, err := Open(w.Path())
	if err != nil {
		f.Fatal(err)
	}
	defer seg.Close()
	var clock int64 = 1 // end times, increasing over every input
	f.Fuzz(func(t *testing.T, ops []byte, cut uint16) {
		for v := range 2 {
			w.RemoveVar(v)
		}
		for v := range 2 {
			if id, err := w.AddVar(fmt.Sprint("v", v), "uint8", rowBytes[v], 100, 50); err != nil || id != v {
				t.Fatalf("AddVar: %d %v", id, err)
			}
		}
		before, err := seg.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		peers0 := map[int]PeerCounters{}
		for _, p := range before.Peers {
			peers0[p.Rank] = p
		}
		var cur RingCursor
		if err := seg.TailRings(&cur, 0); err != nil {
			t.Fatal(err)
		}
		start := cur
		m := telModel{stripes: map[[2]int]*Counters{}, peers: map[int]*PeerCounters{}}
		for ; len(ops) >= 4; ops = ops[4:] {
			c := fuzzCall(ops, rowBytes)
			clock++
			c.EndNano = clock
			w.Record(&c)
			key := [2]int{int(c.Var), min(int(c.Reader), 1)}
			s := m.stripes[key]
			if s == nil {
				s = &Counters{}
				m.stripes[key] = s
			}
			s.Calls++
			s.Rows += c.Rows
			s.Bytes += c.Bytes
			s.LocalRows += c.LocalRows
			s.RemoteRows += c.RemoteRows
			s.MRRegs += c.MRRegs
			s.Failovers += c.Failovers
			var tot int64
			for p, ns := range c.Phases {
				s.PhaseNs[p] += ns
				tot += ns
			}
			if c.Err {
				s.Errors++
			}
			s.CallHist[histBucket(tot)]++
			rk := c.Targets.Rank(0)
			p := m.peers[rk]
			if p == nil {
				p = &PeerCounters{Rank: rk}
				m.peers[rk] = p
			}
			p.Calls++
			p.Rows += c.Rows
			p.Bytes += c.Bytes
			m.ring = append(m.ring, c)
		}
		if cut%64 != 0 && cut < 64 { // (rarely: a copy costs more than the rest)
			data, err := os.ReadFile(w.Path())
			if err != nil {
				t.Fatal(err)
			}
			cutPath := filepath.Join(dir, "cut", "ddstore-cut-0.tel")
			if err := os.WriteFile(cutPath, data[:len(data)-8*(int(cut)%64)], 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(cutPath)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("segment cut by %d words: Open gives %v, want ErrTruncated", cut%64, err)
			}
		}
		s := seg
		snap, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Vars) != 2 {
			t.Fatalf("%d variables, want 2", len(snap.Vars))
		}
		for _, v := range snap.Vars {
			if v.RowBytes != rowBytes[v.ID] || v.Name != fmt.Sprint("v", v.ID) {
				t.Fatalf("variable %d: %+v", v.ID, v)
			}
			for r := range 2 {
				want := Counters{}
				if s := m.stripes[[2]int{v.ID, r}]; s != nil {
					want = *s
				}
				var got Counters
				if r < len(v.Readers) {
					got = v.Readers[r]
				}
				rh := got.RowHist
				got.RowHist = Histogram{}
				if got != want {
					t.Fatalf("variable %d stripe %d:\n got %+v\nwant %+v", v.ID, r, got, want)
				}
				if rh.Count() != uint64(want.Calls) { // every call has rows
					t.Fatalf("variable %d stripe %d: row histogram counts %d of %d calls", v.ID, r, rh.Count(), want.Calls)
				}
			}
		}
		for rk := range 6 {
			want, got := PeerCounters{Rank: rk}, PeerCounters{Rank: rk}
			if p := m.peers[rk]; p != nil {
				want = *p
			}
			if p := snap.Peer(rk); p != nil {
				got = p.Sub(peers0[rk])
			}
			if got.Calls != want.Calls || got.Rows != want.Rows || got.Bytes != want.Bytes || got.Errors != 0 {
				t.Fatalf("peer %d: %+v, want calls %d rows %d bytes %d", rk, got, want.Calls, want.Rows, want.Bytes)
			}
		}
		// Each ring keeps its last records: reader 0's lane ring 4, the
		// shared ring 8.
		ringOf := func(c *Call) int { return map[bool]int{true: 1, false: 0}[c.Reader == 0] }
		var count, seq [2]uint64
		for i := range m.ring {
			count[ringOf(&m.ring[i])]++
		}
		var want []Call
		var wantSeq []uint64
		var lost uint64
		for i := range m.ring {
			k := ringOf(&m.ring[i])
			size := map[int]uint64{0: 8, 1: 4}[k]
			if count[k]-seq[k] <= size {
				want = append(want, m.ring[i])
				wantSeq = append(wantSeq, start.Pos[k]+seq[k])
			} else {
				lost++
			}
			seq[k]++
		}
		n, dropped, err := s.ReadRings(&cur, recs)
		if err != nil || n != len(want) || dropped != lost || cur.Pos[0] != start.Pos[0]+count[0] || cur.Pos[1] != start.Pos[1]+count[1] {
			t.Fatalf("ReadRings = %d records, %d lost, %v, cursor %v; want %d, %d of %d recorded", n, dropped, err, cur.Pos[:3], len(want), lost, len(m.ring))
		}
		for i, r := range recs[:n] {
			c := want[i]
			if r.Seq != wantSeq[i] || r.Ring != ringOf(&c) || r.TimeNs-c.EndNano != recs[0].TimeNs-want[0].EndNano ||
				r.Var != c.Var || r.Reader != min(c.Reader, 1) || r.Rows != c.Rows ||
				r.Bytes != c.Bytes || r.LocalRows != c.LocalRows || r.RemoteRows != c.RemoteRows || r.MRRegs != c.MRRegs ||
				r.Phases != c.Phases || r.Err != c.Err || r.Targets != 1<<c.Targets.Rank(0) || r.NTargets != 1 ||
				r.FirstTargets[0] != int32(c.Targets.Rank(0)) {
				t.Fatalf("ring record %d (ring %d seq %d): %+v, recorded %+v", i, ringOf(&c), wantSeq[i], r, c)
			}
		}
	})
}
