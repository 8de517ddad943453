package telemetry

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzTelemetryReader corrupts a valid segment (two variables, two reader
// stripes, a ring that has wrapped, the loader block): the input is a list
// of patches, each 10 bytes (a little-endian 8-byte word index, taken
// modulo the segment's words, and the 8-byte value written there), and cut
// shortens the file by cut mod 64 words. Unlike FuzzOpen's arbitrary bytes,
// most inputs keep a valid magic and version, so the fuzzer reaches the
// variable table, the stripes, the histograms and the ring. Discover,
// Open, Info, Snapshot and ReadRing must return data or a typed error,
// never panic, hang or read past the mapping; a full-length file whose
// header opens must snapshot (a panic that the reader's fault guard turned
// into ErrTruncated fails here). make fuzz-telemetry runs it for 1M
// executions and keeps the corpus in testdata/fuzz/FuzzTelemetryReader.
func FuzzTelemetryReader(f *testing.F) {
	good := validSegmentBytes(f)
	words := len(good) / 8
	patch := func(word int, v uint64) []byte {
		b := make([]byte, 10)
		binary.LittleEndian.PutUint16(b, uint16(word))
		binary.LittleEndian.PutUint64(b[2:], v)
		return b
	}
	f.Add([]byte{}, uint16(0))
	f.Add(patch(hVersion/8, Version+1), uint16(0))
	f.Add(patch(hMaxVars/8, 1<<20), uint16(0))
	f.Add(patch(hRingHead/8, 1<<62), uint16(0))
	f.Add(append(patch(int(headerBytes)/8, 3), patch(int(headerBytes)/8+1, 1<<40)...), uint16(0))
	f.Add(patch(words-1, ^uint64(0)), uint16(1))
	f.Add([]byte{}, uint16(40))
	dir := f.TempDir()
	path := filepath.Join(dir, "ddstore-fuzz-1.tel")
	buf := make([]byte, len(good))
	recs := make([]Record, 4)
	f.Fuzz(func(t *testing.T, patches []byte, cut uint16) {
		copy(buf, good)
		for ; len(patches) >= 10; patches = patches[10:] {
			w := int(binary.LittleEndian.Uint16(patches)) % words
			binary.LittleEndian.PutUint64(buf[8*w:], binary.LittleEndian.Uint64(patches[2:]))
		}
		n := len(buf) - 8*(int(cut)%64)
		if err := os.WriteFile(path, buf[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		readFuzzed(t, dir, path, recs)
	})
}

// readFuzzed checks that the reader copes with the one segment file path
// in dir: Discover, Open, Info, Snapshot and ReadRing return data or a
// typed error, and agree with each other; a segment that opens snapshots.
func readFuzzed(t *testing.T, dir, path string, recs []Record) {
	infos, err := Discover(dir)
	if err != nil || len(infos) != 1 {
		t.Fatalf("Discover: %v %+v", err, infos)
	}
	s, err := Open(path)
	if err != nil {
		if !errors.Is(err, ErrForeign) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrVersion) &&
			!errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotReady) {
			t.Fatalf("untyped error: %v", err)
		}
		if infos[0].State != StateInvalid {
			t.Fatalf("Open fails (%v) but Discover says %+v", err, infos[0])
		}
		return
	}
	defer s.Close()
	if infos[0].State == StateInvalid {
		t.Fatalf("Open works but Discover says %+v", infos[0])
	}
	if _, err := s.Info(); err != nil {
		t.Fatalf("Info of an open segment: %v", err)
	}
	snap, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot of a segment that opened: %v", err)
	}
	for _, v := range snap.Vars {
		if len(v.Readers) > snap.MaxReaders {
			t.Fatalf("var %d has %d readers > %d", v.ID, len(v.Readers), snap.MaxReaders)
		}
		tot := v.Total()
		_ = tot.CallHist.Quantile(0.5)
		_ = tot.CallHist.Quantile(0.99)
	}
	var rc RingCursor
	for _, keep := range []uint64{0, 2, 1 << 63} {
		if err := s.TailRings(&rc, keep); err != nil {
			t.Fatalf("TailRings: %v", err)
		}
		before := rc
		n, _, err := s.ReadRings(&rc, recs)
		if err != nil || n > len(recs) {
			t.Fatalf("ReadRings = %d, %v", n, err)
		}
		for i := range s.Rings() {
			if rc.Pos[i] < before.Pos[i] && before.Pos[i] <= ^uint64(0)>>1 {
				t.Fatalf("ReadRings moved ring %d back: %d -> %d", i, before.Pos[i], rc.Pos[i])
			}
		}
		for i := range recs[:n] {
			if recs[i].Ring < 0 || recs[i].Ring >= s.Rings() {
				t.Fatalf("record of ring %d of %d", recs[i].Ring, s.Rings())
			}
		}
		if _, err := s.SkipRings(&rc); err != nil {
			t.Fatalf("SkipRings: %v", err)
		}
	}
	head := s.RingHead()
	for _, cursor := range []uint64{0, head, head - 1, head - 3, 1 << 63, ^uint64(0)} {
		n, next, _, err := s.ReadRing(cursor, recs)
		if err != nil || n > len(recs) || next > head && next > cursor {
			t.Fatalf("ReadRing(%d) = %d, %d, %v (head %d)", cursor, n, next, err, head)
		}
	}
}
