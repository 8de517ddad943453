package fabric

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// TestStuckCallQuarantined: a provider call that never returns (simulated:
// the guarded call spins as fi_read does on a stopped shm peer's lock) is
// abandoned by the watchdog soon after its deadline: the call returns
// fault.ErrTimeout naming the peer, the reader is quarantined (counted, every
// later call refused), and a new reader works.
func TestStuckCallQuarantined(t *testing.T) {
	// Reads that must succeed (the first also connects) get the default
	// deadline, which holds on a loaded machine; the stuck one 300 ms.
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo"}
	f := openOrSkip(t, o)
	f.guarded = true
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 6)
	dst := make([]byte, 4096)
	op := ReadOp{Dst: dst, Peer: peers[0], Addr: tgs[0].base, Key: tgs[0].key}
	readChecked(t, "before", r.ReadBatch, []ReadOp{op}, tgs, peers)
	q0 := QuarantinedReaders()
	r.SetTimeout(300 * time.Millisecond)
	setTestStuck(true)
	start := time.Now()
	_, err := r.Read(op)
	el := time.Since(start)
	setTestStuck(false)
	t.Logf("after %v: %v", el, err)
	if !errors.Is(err, fault.ErrTimeout) || !fault.IsRemote(err) || fault.RankOf(err) != 6 || !strings.Contains(err.Error(), "quarantined") {
		t.Fatalf("want a timeout naming rank 6 and the quarantine, got %v", err)
	}
	// Deadline 300ms + grace 250ms + a 50ms scan: generous margin for load.
	if el > 5*time.Second {
		t.Fatalf("abandoned after %v", el)
	}
	if q := QuarantinedReaders() - q0; q != 1 {
		t.Fatalf("%d readers quarantined, want 1", q)
	}
	if _, err := r.Read(op); !errors.Is(err, fault.ErrClosed) || !strings.Contains(err.Error(), "quarantined") {
		t.Fatalf("quarantined reader used again: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	p2, err := r2.AddPeer(6, tgs[0].addr)
	if err != nil {
		t.Fatal(err)
	}
	op.Peer = p2
	// The blamed peer is not entered again for a while: a new reader's
	// read of it fails at once.
	start = time.Now()
	if _, err := r2.Read(op); !errors.Is(err, fault.ErrTimeout) || fault.RankOf(err) != 6 || !strings.Contains(err.Error(), "never returned") {
		t.Fatalf("read of the blamed peer: %v", err)
	} else if el := time.Since(start); el > time.Second {
		t.Fatalf("read of the blamed peer took %v: it entered the provider", el)
	}
	forgetStuck()
	readChecked(t, "new reader", r2.ReadBatch, []ReadOp{op}, tgs, []Peer{p2})
}

// TestQuarantinedRegionRemoved: on shm, a quarantined reader's endpoint
// is never closed, so the provider never removes its region file
// (/dev/shm/<pid>:<uid>:<n>, 16 MiB); the Fabric's Close does, and leaves
// the live readers' regions to the provider. (CI's /dev/shm here held one
// such file per run, from the stuck-peer tests' ranks.)
func TestQuarantinedRegionRemoved(t *testing.T) {
	o := Options{Provider: "shm"}
	f := openOrSkip(t, o)
	f.guarded = true
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 3)
	op := ReadOp{Dst: make([]byte, 4096), Peer: peers[0], Addr: tgs[0].base, Key: tgs[0].key}
	readChecked(t, "before", r.ReadBatch, []ReadOp{op}, tgs, peers)
	region := r.shmRegion()
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("the reader's region %q: %v", region, err)
	}
	t.Cleanup(func() { os.Remove(region) }) // should the test fail
	r.SetTimeout(300 * time.Millisecond)
	setTestStuck(true)
	_, err := r.Read(op)
	setTestStuck(false)
	defer forgetStuck()
	if !errors.Is(err, fault.ErrTimeout) || !strings.Contains(err.Error(), "quarantined") {
		t.Fatalf("want the reader quarantined, got %v", err)
	}
	r.Close() // closes nothing: quarantined
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("the quarantined reader's region went before the Fabric's Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(region); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the quarantined reader's region %s is still there after Close (%v)", region, err)
	}
}

// TestFailedCloseRegionRemoved: on shm, an endpoint whose close failed
// after a failed read keeps its region file while the reader goes on with
// a new endpoint; the Fabric's Close removes the file.
func TestFailedCloseRegionRemoved(t *testing.T) {
	o := Options{Provider: "shm", Timeout: 3 * time.Second}
	f := openOrSkip(t, o)
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 4)
	region := r.shmRegion()
	t.Cleanup(func() { os.Remove(region) }) // should the test fail
	r.setFailClose(true)
	_, err := r.Read(ReadOp{Dst: make([]byte, 4096), Peer: peers[0], Addr: tgs[0].base + 1<<30, Key: tgs[0].key}) // refused: teardown
	r.setFailClose(false)
	if err == nil || !strings.Contains(err.Error(), "fi_close(endpoint) failed") {
		t.Fatalf("want the failed close reported, got %v", err)
	}
	readChecked(t, "after the failed close", r.ReadBatch, []ReadOp{{Dst: make([]byte, 4096), Peer: peers[0], Addr: tgs[0].base, Key: tgs[0].key}}, tgs, peers)
	if now := r.shmRegion(); now == region {
		t.Fatalf("the reader still has the endpoint whose close failed (%s)", region)
	}
	if _, err := os.Stat(region); err != nil {
		t.Fatalf("the region of the endpoint whose close failed went before the Fabric's Close: %v", err)
	}
	r.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(region); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the region %s of the endpoint whose close failed is still there after Close (%v)", region, err)
	}
}

// TestShmRegionOf: which endpoint names are shm's, and their region files.
func TestShmRegionOf(t *testing.T) {
	region := func(name string) string { return shmRegionOf([]byte(name)) }
	if got := region("fi_shm://8971:0:1\x00"); got != "/dev/shm/8971:0:1" {
		t.Errorf("a NUL-terminated shm name: region %q", got)
	}
	if got := region("fi_shm://8971:1000:12"); got != "/dev/shm/8971:1000:12" {
		t.Errorf("an shm name: region %q", got)
	}
	// Not shm's, or no plain file name under /dev/shm: nothing to remove.
	for _, name := range []string{"fi_shm://", "fi_shm://..", "fi_shm://../etc/x", "fi_shm://1:2", "fi_shm://1:2:3x",
		"8971:0:1", "\x02\x00\x1f\x90\x7f\x00\x00\x01"} {
		if got := region(name); got != "" {
			t.Errorf("shmRegionOf(%q) = %q, want none", name, got)
		}
	}
}

// TestFailedCloseKeepsBuffers injects a failing endpoint close after a
// failed read: the destinations stay pinned (leaked, counted) instead of
// being handed back to the Go runtime, the error says so, and the reader
// recovers with a fresh endpoint.
func TestFailedCloseKeepsBuffers(t *testing.T) {
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 3 * time.Second}
	f := openOrSkip(t, o)
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 5)
	dst := make([]byte, 4096)
	l0 := LeakedEndpoints()
	leaked.Lock()
	p0 := len(leaked.pins)
	leaked.Unlock()
	r.setFailClose(true)
	_, err := r.Read(ReadOp{Dst: dst, Peer: peers[0], Addr: tgs[0].base, Key: tgs[0].key + 999}) // refused: teardown
	r.setFailClose(false)
	if err == nil || !strings.Contains(err.Error(), "fi_close(endpoint) failed") {
		t.Fatalf("want the failed close reported, got %v", err)
	}
	if n := LeakedEndpoints() - l0; n != 1 {
		t.Fatalf("%d leaked endpoints counted, want 1", n)
	}
	leaked.Lock()
	kept := len(leaked.pins) - p0
	pinned := kept == 1 && leaked.pins[len(leaked.pins)-1].pinned
	leaked.Unlock()
	if !pinned {
		t.Fatalf("destination not kept pinned after the failed close (%d pin sets kept)", kept)
	}
	readChecked(t, "after the failed close", r.ReadBatch, []ReadOp{{Dst: make([]byte, 4096), Peer: peers[0], Addr: tgs[0].base, Key: tgs[0].key}}, tgs, peers)
}
