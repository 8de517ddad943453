package engine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ddstore/ddstore/engine/ctrl"
)

func init() { scenarios["tree"] = scenarioTree }

// TestTreeControlPlane: with Control "tree", 4 ranks on one node (one
// agent, three plain ranks with one connection each) and 4 ranks as 4
// nodes (NodeMode fabric: agents over TCP) get the mesh's all-reduce bits,
// and a rank that exits without Close is found dead by every other: its
// rows fail at once with ErrPeerDead naming it, and so do collectives.
// The same with Control "mesh" (3 connections on every rank), which is no
// longer the default.
func TestTreeControlPlane(t *testing.T) {
	for _, kind := range []string{ControlTree, ControlMesh} {
		for _, mode := range []string{"local", "tcp"} {
			t.Run(kind+"/"+mode, func(t *testing.T) {
				spawnRanks(t, 4, "tree", map[string]string{"MODE": mode, "KIND": kind}, 90*time.Second,
					exitedVictim(3, treeVictimExit)) // the victim exits without Close
			})
		}
	}
}

// treeVictimExit is the status the tree scenario's victim exits with
// (not 1, which a rank that fails its checks exits with).
const treeVictimExit = 3

func scenarioTree(w *worker) error {
	o := storeOptions(w.mode, w.params)
	o.Control = w.param("KIND", ControlTree)
	s, err := Open(o)
	if err != nil {
		return err
	}
	w.rank, w.world = s.Rank(), s.World()
	ci := s.Control()
	want := 1
	if (w.mode == "local" && ci.Agent) || o.Control == ControlMesh {
		want = s.World() - 1
	}
	if ci.Kind != o.Control || ((w.mode == "local" || o.Control == ControlMesh) && ci.Conns != want) {
		return fmt.Errorf("control plane %+v, want %s with %d connections", ci, o.Control, want)
	}
	w.logf("control plane %+v", ci)
	if o.Control == ControlTree {
		if err := checkNodeTable(s, w.mode); err != nil {
			return err
		}
	}
	if err := checkReduce(s, 4096); err != nil {
		return err
	}
	spec := varSpec{name: "t", dt: Bytes, rowBytes: 128, base: 20, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	if w.mode == "tcp" {
		if err := checkLazyPeers(s, spec); err != nil {
			return err
		}
	}
	victim := s.World() - 1
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "added", w.rank, s.World(), 30*time.Second); err != nil {
		return err
	}
	if s.Rank() == victim {
		os.Exit(treeVictimExit) // no Close: its connection breaks
	}
	info, _ := s.Query(spec.name)
	rows := seqIdx(info.Shards[victim], 2)
	dst := make([]byte, 2*spec.rowBytes)
	deadline := time.Now().Add(15 * time.Second)
	for s.Alive(victim) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.Alive(victim) {
		return fmt.Errorf("rank %d still alive 15 s after it exited", victim)
	}
	if err := s.GetBatch(spec.name, rows, dst); !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
		return fmt.Errorf("read of the dead rank's rows: %v, want ErrPeerDead naming rank %d", err, victim)
	}
	live := seqIdx(0, 2)
	if err := s.GetBatch(spec.name, live, dst); err != nil {
		return fmt.Errorf("rows of rank 0: %w", err)
	}
	if err := checkRows(dst, spec.rowBytes, spec.salt(0), live); err != nil {
		return err
	}
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "read", w.rank, victim, 30*time.Second); err != nil {
		return err
	}
	if err := s.Barrier(); !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
		return fmt.Errorf("barrier with a dead rank: %v, want ErrPeerDead naming rank %d", err, victim)
	}
	s.Close()
	return nil
}

// checkNodeTable: under tree, the ranks of a node map one table (the
// memfd's inode, from /proc/self/maps, gathered from every rank: one for
// 4 ranks on one node, 4 for 4 nodes), and the peers' fabric addresses
// are views into it, not copies.
func checkNodeTable(s *Store, mode string) error {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	var inode string
	for line := range strings.Lines(string(maps)) {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasPrefix(f[5], "/memfd:ddstore-ctrl-table") {
			if inode != "" && inode != f[4] {
				return fmt.Errorf("rank %d maps two tables (inodes %s and %s)", s.Rank(), inode, f[4])
			}
			inode = f[4]
		}
	}
	if inode == "" {
		return fmt.Errorf("rank %d maps no control-plane table", s.Rank())
	}
	all, err := s.AllGather("table-inode", []byte(inode))
	if err != nil {
		return err
	}
	distinct := map[string]bool{}
	for _, b := range all {
		distinct[string(b)] = true
	}
	if want := map[string]int{"local": 1, "tcp": s.World()}[mode]; len(distinct) != want {
		return fmt.Errorf("%d ranks in mode %s map %d tables, want %d", s.World(), mode, len(distinct), want)
	}
	tab := s.tree.Table()
	for r, p := range s.peers {
		if r == s.Rank() || !s.readsThroughFabric(s.Rank(), r) {
			continue
		}
		blob := tab.Blob(r)
		lo, at := uintptr(unsafe.Pointer(unsafe.SliceData(blob))), uintptr(unsafe.Pointer(unsafe.SliceData(p.Addr)))
		if len(p.Addr) == 0 || at < lo || at+uintptr(len(p.Addr)) > lo+uintptr(len(blob)) {
			return fmt.Errorf("rank %d's fabric address of rank %d (%d bytes) is not a view into the node's table", s.Rank(), r, len(p.Addr))
		}
	}
	return nil
}

// checkLazyPeers: a new Reader's address vector is empty, and a peer's
// address enters it on the first read from that peer only (4 nodes: this
// rank reads rank r+1's rows twice, then rank r+2's).
func checkLazyPeers(s *Store, spec varSpec) error {
	r, info, err := readerAndInfo(s, spec.name)
	if err != nil {
		return err
	}
	defer r.Close()
	dst := make([]byte, 2*spec.rowBytes)
	var want []int
	for _, q := range []int{1, 1, 2} {
		peer := (s.Rank() + q) % s.World()
		if len(want) == 0 || want[len(want)-1] != peer {
			want = append(want, peer)
		}
		rows := seqIdx(info.Shards[peer], 2)
		if err := r.GetBatch(spec.name, rows, dst); err != nil {
			return err
		}
		if err := checkRows(dst, spec.rowBytes, spec.salt(0), rows); err != nil {
			return err
		}
		if got := r.c.fr.PeerRanks(); !slices.Equal(got, want) {
			return fmt.Errorf("rank %d, after reading rank %d's rows: the reader's address vector holds ranks %v, want %v", s.Rank(), peer, got, want)
		}
	}
	return nil
}

func TestTreeTiming(t *testing.T) {
	const ms = time.Millisecond
	for _, c := range []struct{ live, p, s, d, wp, ws, wd, wl time.Duration }{
		{DefaultLiveness, 0, 0, 0, 0, 0, 0, DefaultLiveness},                                // ring: ctrl's defaults; a plain rank: liveness
		{0, 0, 0, 0, 0, 0, 0, DefaultLiveness},                                              // unset: the default
		{time.Second, 0, 0, 0, 277777777, 555555554, time.Second, time.Second},              // a shorter liveness sets the ring too
		{3 * time.Second, 0, 0, 0, 833333333, 1666666666, 3 * time.Second, 3 * time.Second}, // netns-test's LIVENESS=3
		{3600 * ms, 0, 0, 0, 0, 0, 0, 3600 * ms},                                            // ctrl's default exactly
		{time.Minute, 0, 0, 0, 0, 0, 0, time.Minute},                                        // a longer one only a plain rank's
		{time.Second, 0, 0, 5 * time.Second, 0, 0, 5 * time.Second, time.Second},            // explicit wins, the rest default
		{0, 2 * time.Second, 4 * time.Second, 8 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, DefaultLiveness},
	} {
		p, s, d, l := treeTiming(c.live, c.p, c.s, c.d)
		if p != c.wp || s != c.ws || d != c.wd || l != c.wl {
			t.Errorf("treeTiming(%v, %v, %v, %v) = %v, %v, %v, %v; want %v, %v, %v, %v", c.live, c.p, c.s, c.d, p, s, d, l, c.wp, c.ws, c.wd, c.wl)
		}
		// What ctrl makes of it: the ring's timings grow (Validate) and
		// the store's defaults meet the 5 s.
		o := ctrl.Options{Rank: 0, World: 1, Job: "t", Period: p, SuspectAfter: s, DeadAfter: d, LocalDeadAfter: l}
		o.EnsureDefaults()
		if err := o.Validate(); err != nil {
			t.Errorf("liveness %v: %v", c.live, err)
		}
		if c.live == DefaultLiveness && o.DeadAfter > 5*time.Second {
			t.Errorf("default ring: dead after %v", o.DeadAfter)
		}
	}
}
