package telemetry

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// validSegmentBytes returns the bytes of a small, valid segment with one
// variable and a few calls recorded.
func validSegmentBytes(t testing.TB) []byte {
	t.Helper()
	w, err := Create(WriterOptions{Dir: t.TempDir(), Job: "seed", Rank: 1, World: 2, MaxVars: 2, MaxReaders: 2, RingSize: 4,
		LaneRingSize: 4, Provider: "tcp", ReaderMode: "thread", Method: "dir"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	id, _ := w.AddVar("x", "float32", 8, 64, 32) // reader 0's calls in lane ring 1, reader 1's shared
	var c Call
	for i := int64(1); i <= 6; i++ {
		patternCall(&c, int32(id), int32(i%2), i, 8)
		w.Record(&c)
	}
	w.RecordLoader(10, 1000)
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func put(b []byte, off int, v uint64) []byte {
	c := append([]byte(nil), b...)
	binary.LittleEndian.PutUint64(c[off:], v)
	return c
}

func TestBadFiles(t *testing.T) {
	good := validSegmentBytes(t)
	be := make([]byte, len(good))
	copy(be, good)
	binary.BigEndian.PutUint64(be, Magic)
	cases := []struct {
		name string
		data []byte
		want error
		text string
	}{
		{"empty", nil, ErrForeign, "0 bytes"},
		{"short-magic", good[:5], ErrTruncated, "shorter than"},
		{"short-foreign", []byte("hello"), ErrForeign, ""},
		{"foreign", append([]byte("#!/bin/sh\necho hi\n"), make([]byte, 2000)...), ErrForeign, "starts with"},
		{"other-endian", be, ErrForeign, "byte order"},
		{"magic-only", good[:8], ErrTruncated, ""},
		{"header-cut", good[:500], ErrTruncated, "header needs"},
		{"body-cut", good[:len(good)-1], ErrTruncated, "header says"},
		{"not-ready", put(good, hVersion, 0), ErrNotReady, "being created"},
		{"newer", put(good, hVersion, Version+1), ErrVersion, "upgrade"},
		{"max-version", put(good, hVersion, 1<<63), ErrVersion, ""},
		{"vars-0", put(good, hMaxVars, 0), ErrCorrupt, "variable slots"},
		{"vars-huge", put(good, hMaxVars, 1<<62), ErrCorrupt, "variable slots"},
		{"readers-huge", put(good, hMaxReaders, 1<<40), ErrCorrupt, "reader stripes"},
		{"ring-not-pow2", put(good, hRingSize, 3), ErrCorrupt, "ring size"},
		{"ring-bigger", put(good, hRingSize, 8), ErrCorrupt, "segment size"},
		{"lane-ring-size", put(good, hLaneRingSize, 6), ErrCorrupt, "lane ring size"},
		{"lane-ring-bigger", put(good, hLaneRingSize, 8), ErrCorrupt, "segment size"},
		{"lane-ring-off", put(good, hLaneRingOff, 64), ErrCorrupt, "lane ring offset"},
		{"filebytes", put(good, hFileBytes, 1<<60), ErrCorrupt, "segment size"},
		{"buckets", put(good, hNumBuckets, 41), ErrCorrupt, "buckets"},
		{"stripe-off", put(good, hStripeOff, 3), ErrCorrupt, "stripe offset"},
		{"ring-off", put(good, hRingOff, 1<<62), ErrCorrupt, "ring offset"},
		{"header-size", put(good, hHeaderBytes, 64), ErrCorrupt, "header size"},
		{"rank", put(good, hRank, 2), ErrCorrupt, "rank 2 of world 2"},
		{"pid", put(good, hPid, 0), ErrCorrupt, "pid"},
		{"peers-0", put(good, hMaxPeers, 0), ErrCorrupt, "peer slots"},
		{"peer-off", put(good, hPeerOff, 5), ErrCorrupt, "peer table offset"},
		{"peer-slot", put(good, hPeerSlotBytes, 64), ErrCorrupt, "peer slot size"},
		{"peers-more", put(good, hMaxPeers, 3), ErrCorrupt, "ring offset"},
	}
	dir := t.TempDir()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "ddstore-"+tc.name+"-0.tel")
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Open(path)
			if err == nil {
				s.Close()
				t.Fatalf("Open succeeded, want %v", tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), path) && tc.name != "empty" && tc.name != "short-foreign" && tc.name != "short-magic" {
				t.Fatalf("error %q does not say %q and name the file", err, tc.text)
			}
			info, err2 := inspect(path)
			if !errors.Is(err2, tc.want) || info.State != StateInvalid || !errors.Is(info.Err, tc.want) {
				t.Fatalf("inspect: %+v %v", info, err2)
			}
		})
	}
	infos, err := Discover(dir)
	if err != nil || len(infos) != len(cases) {
		t.Fatalf("Discover: %d infos, %v", len(infos), err)
	}
	for _, in := range infos {
		if in.State != StateInvalid || in.Err == nil {
			t.Errorf("Discover %s: %+v", in.Path, in)
		}
	}
	// A directory and other names are not segments.
	os.Mkdir(filepath.Join(dir, "ddstore-dir-0.tel"), 0o700)
	os.WriteFile(filepath.Join(dir, "other.tel"), good, 0o600)
	os.WriteFile(filepath.Join(dir, "ddstore-x-0.tel.bak"), good, 0o600)
	if infos, _ := Discover(dir); len(infos) != len(cases) {
		t.Errorf("Discover picked up non-segments: %d", len(infos))
	}
	if _, err := Open(filepath.Join(dir, "ddstore-dir-0.tel")); !errors.Is(err, ErrForeign) {
		t.Errorf("Open(dir): %v", err)
	}
	if _, err := Discover(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Discover(missing): %v", err)
	}

	// The good copy opens; an unreadable file at a writer's name is replaced.
	path := filepath.Join(dir, "ddstore-seed-1.tel")
	os.WriteFile(path, good, 0o600)
	s := openTest(t, path)
	snap, err := s.Snapshot()
	if err != nil || len(snap.Vars) != 1 || snap.Total().Calls != 6 || snap.Job != "seed" || snap.Loader.Batches != 1 {
		t.Fatalf("good copy: %+v %v", snap, err)
	}
	// The copy's pid is ours (alive), so Create refuses; a foreign file is replaced.
	if _, err := Create(WriterOptions{Dir: dir, Job: "seed", Rank: 1, World: 2}); !errors.Is(err, ErrInUse) {
		t.Fatalf("Create over live copy: %v", err)
	}
	fpath := filepath.Join(dir, "ddstore-foreign-0.tel")
	w, err := Create(WriterOptions{Dir: dir, Job: "foreign", MaxVars: 1, MaxReaders: 1, RingSize: 1})
	if err != nil {
		t.Fatalf("Create over a foreign file: %v", err)
	}
	if w.Path() != fpath {
		t.Fatalf("path %s", w.Path())
	}
	w.Close()
}

// TestTruncatedUnderReader: a file cut short after Open gives ErrTruncated
// from Snapshot/ReadRing instead of a crash (SIGBUS on the mapping).
func TestTruncatedUnderReader(t *testing.T) {
	good := validSegmentBytes(t)
	path := filepath.Join(t.TempDir(), "ddstore-cut-0.tel")
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path)
	if _, err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Snapshot of truncated file: %v", err)
	}
	dst := make([]Record, 4)
	if _, _, _, err := s.ReadRing(0, dst); !errors.Is(err, ErrTruncated) {
		t.Fatalf("ReadRing of truncated file: %v", err)
	}
	if _, err := s.Info(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Info of truncated file: %v", err)
	}
	s.Close()
	if _, err := s.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Snapshot after Close: %v", err)
	}
}
