package telemetry

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen feeds arbitrary bytes as a segment file to Open, Snapshot,
// ReadRing and Discover: they must return a typed error or data, never
// panic or hang. The seed corpus (testdata/fuzz/FuzzOpen) holds a valid
// small segment and broken variants of it; run
//
//	go test -run '^$' -fuzz FuzzOpen -fuzztime 60s -fuzzminimizetime 2x ./telemetry
//
// (with the default minimize time the fuzzer spends most of a short run
// shrinking the 5.5 KB valid seed and reports 0 execs/sec meanwhile).
func FuzzOpen(f *testing.F) {
	good := validSegmentBytes(f)
	g4 := newGeometry4(2, 2, 4, 2, 3, 4) // validSegmentBytes' layout
	f.Add(good)
	f.Add(good[:headerBytes])
	f.Add(put(good, hVersion, 2))
	if v2, err := os.ReadFile(filepath.Join("testdata", "v2-segment.tel")); err == nil {
		f.Add(v2)
	}
	if v3, err := os.ReadFile(filepath.Join("testdata", "v3-segment.tel")); err == nil {
		f.Add(v3)
	}
	f.Add(put(good, hLaneRingSize, 1<<20))                                        // lane rings past the file
	f.Add(put(good, int(g4.laneHead(1)), 1<<62))                                  // a lane ring's head far ahead
	f.Add(put(good, hPeerLanes, maxPeerLanes+1))                                  // too many lanes
	f.Add(put(put(good, hPeerLanes, 1), hLanesUsed, 1<<63))                       // lanes out of step with the size
	f.Add(put(put(good, hVarsUsed, 1<<63), headerBytes+vStripesUsed, ^uint64(0))) // scan marks out of range
	dir := f.TempDir()
	path := filepath.Join(dir, "ddstore-fuzz-0.tel")
	recs := make([]Record, 8)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		readFuzzed(t, dir, path, recs)
	})
}

// TestWriteFuzzSeeds regenerates testdata/fuzz/FuzzOpen when
// DDSTORE_TEL_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("DDSTORE_TEL_WRITE_SEEDS") != "1" {
		t.Skip("set DDSTORE_TEL_WRITE_SEEDS=1 to rewrite the seed corpus")
	}
	good := validSegmentBytes(t)
	g4 := newGeometry4(2, 2, 4, 2, 3, 4)
	seeds := map[string][]byte{
		"valid":             good,
		"truncated":         good[:len(good)/2],
		"header-only":       good[:headerBytes],
		"newer-version":     put(good, hVersion, Version+1),
		"not-ready":         put(good, hVersion, 0),
		"foreign":           []byte("not a segment at all, just some text\n"),
		"huge-geometry":     put(put(good, hMaxVars, maxMaxVars), hMaxReaders, maxMaxReaders),
		"odd-var-gen":       put(good, int(headerBytes+vGen), 7),
		"ring-garbage":      put(put(good, int(newGeometry(2, 2, 4, 2, 3).ringOff+rSeq), 1<<40), hRingHead, 1<<62),
		"lane-ring-garbage": put(put(good, int(g4.laneSlot(1, 1)+rSeq), 1<<40), int(g4.laneHead(1)), 1<<62),
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
