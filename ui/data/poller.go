package data

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// Options configure a Poller. Zero fields take the documented defaults.
type Options struct {
	Dir string // segment directory; default "/dev/shm"
	// Job selects one job: its id, or a prefix of one that no other job
	// of Dir starts with (an exact id always wins); "" = all jobs. A
	// selection that matches no job or several shows no rank, and the
	// frame says why (Frame.JobErr).
	Job     string
	History int              // throughput points kept per rank; default 300
	Recent  int              // recent calls kept per rank; default 256
	Now     func() time.Time // clock for interval lengths; default time.Now
	// KeepRaw makes every Frame carry the snapshots and ring records it
	// was made from (Frame.Raw), for ddtop record.
	KeepRaw bool
	// NoCalls: nothing shows recent calls (ddtop --once), so the rings
	// are never read and no ring loss is counted.
	NoCalls bool
}

// DefaultDir is where segments live unless told otherwise.
const DefaultDir = "/dev/shm"

// ErrOptions reports invalid Options.
var ErrOptions = errors.New("ddtop: invalid options")

// Validate checks the options.
func (o Options) Validate() error {
	if o.History < 0 {
		return fmt.Errorf("%w: History %d < 0", ErrOptions, o.History)
	}
	if o.Recent < 0 {
		return fmt.Errorf("%w: Recent %d < 0", ErrOptions, o.Recent)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Dir == "" {
		o.Dir = DefaultDir
	}
	if o.History == 0 {
		o.History = 300
	}
	if o.Recent == 0 {
		o.Recent = 256
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Poller follows the segments of one directory. Poll, Feed and Recycle
// are not safe for concurrent use; the Frames they return are immutable
// and may be shared, unless given back to Recycle.
type Poller struct {
	o      Options
	dir    *telemetry.SegmentDir
	ranks  map[string]*tracked     // by path
	open   []*telemetry.Segment    // scratch: the open segments, for check
	infos  []telemetry.SegmentInfo // scratch: this poll's segments
	seen   map[string]bool         // scratch: the paths this poll found
	check  telemetry.WriterCheck
	polls  uint64    // Polls so far
	blocks blockPool // recent-call blocks for reuse (Recycle)
	job    string    // the job Options.Job last resolved to
	// hideCalls: no page on screen shows recent calls (ShowCalls); a
	// poll moves the ring cursors to the heads, counting losses, and
	// copies no record.
	hideCalls atomic.Bool
}

// ShowCalls says whether what is on screen shows recent calls (default
// true). While false, polls read only the rings' heads (their loss count
// still grows as when reading); when it is true again, the next poll
// reads back what the rings still hold, up to Options.Recent a ring,
// after the last record read. Safe to call while a poll runs.
func (p *Poller) ShowCalls(on bool) { p.hideCalls.Store(!on) }

// CallsShown is what ShowCalls last set.
func (p *Poller) CallsShown() bool { return !p.hideCalls.Load() }

// tracked is one open segment and what ddtop remembers about it.
type tracked struct {
	seg                 *telemetry.Segment
	startNs             int64
	prev                *telemetry.Snapshot
	spare               *telemetry.Snapshot // the snapshot before prev, for SnapshotTo
	prevAt              time.Time
	varNames            map[int32]string // of prev's variables; shared by the Ranks made from it
	rowsHist, bytesHist ring
	cursor              telemetry.RingCursor
	started             bool
	skipped             bool                 // the last poll skipped the rings (ShowCalls)
	readTo              telemetry.RingCursor // where the last read of records ended
	recent              callTail             // the last o.Recent calls
	dropped             uint64
	raw                 *Recorded // this poll's raw data (Options.KeepRaw)
	made                *Rank     // the Rank of the last poll
	spareRank           *Rank     // a recycled Rank of this segment (Recycle)
	exitedAt            time.Time // when a poll first saw the writer exited; zero while it is not
}

// NewPoller returns a Poller; it opens nothing until Poll.
func NewPoller(o Options) (*Poller, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	return &Poller{o: o, dir: telemetry.NewSegmentDir(o.Dir), ranks: map[string]*tracked{}, seen: map[string]bool{}}, nil
}

// Dir is the directory being followed.
func (p *Poller) Dir() string { return p.o.Dir }

// Close closes every open segment.
func (p *Poller) Close() error {
	var errs []error
	for path, t := range p.ranks {
		errs = append(errs, t.seg.Close())
		delete(p.ranks, path)
	}
	return errors.Join(errs...)
}

// Poll discovers the segments, opens new ones, closes vanished or replaced
// ones, snapshots every open one and returns the frame. Segments that cannot
// be read are listed in Frame.Problems; the error is only for a directory
// that cannot be listed.
func (p *Poller) Poll() (*Frame, error) {
	now := p.o.Now()
	p.open = p.open[:0]
	for _, t := range p.ranks {
		p.open = append(p.open, t.seg)
	}
	p.check.Check(p.open) // one poll tells which writers exited
	clear(p.open)
	infos, err := p.dir.AppendDiscover(p.infos[:0], p.openSegment)
	p.infos = infos[:0]
	if err != nil {
		return nil, fmt.Errorf("ddtop: discover segments in %s: %w", p.o.Dir, err)
	}
	p.polls++
	job, jobErr := p.matchJob(infos)
	if jobErr != nil {
		infos = nil // no rank to show: the frame says why
	}
	f := &Frame{At: now, Dir: p.o.Dir, Job: job, JobErr: jobErr, poll: p.polls}
	seen := p.seen
	clear(seen)
	for _, in := range infos {
		if job != "" && in.Job != job {
			continue
		}
		if in.State == telemetry.StateInvalid {
			if in.Err != nil && !transient(in.Err) {
				f.Problems = append(f.Problems, fmt.Sprintf("%s: %v", in.Path, in.Err))
			}
			continue
		}
		seen[in.Path] = true
		t := p.ranks[in.Path]
		if t != nil && t.startNs != in.StartNs {
			t.seg.Close() // the file was replaced by a new incarnation
			t = nil
		}
		if t == nil {
			seg, err := telemetry.Open(in.Path)
			if err != nil {
				if !transient(err) {
					f.Problems = append(f.Problems, fmt.Sprintf("%s: %v", in.Path, err))
				}
				delete(p.ranks, in.Path)
				continue
			}
			t = &tracked{seg: seg, startNs: in.StartNs,
				rowsHist: newRing(p.o.History), bytesHist: newRing(p.o.History)}
			p.ranks[in.Path] = t
		}
		r, err := p.sample(t, in, now)
		if err != nil {
			f.Problems = append(f.Problems, fmt.Sprintf("%s: %v", in.Path, err))
			continue
		}
		f.Ranks = append(f.Ranks, r)
		if t.raw != nil {
			f.Raw = append(f.Raw, *t.raw)
		}
	}
	for path, t := range p.ranks {
		if !seen[path] {
			t.seg.Close()
			delete(p.ranks, path)
		}
	}
	p.finish(f)
	return f, nil
}

// Recycle gives back a frame of Poll that its caller no longer reads,
// and that it shared with nobody, together with every frame polled before
// it. Later Polls fill the memory of f's ranks (a Rank with its Vars,
// Readers and Peers is about 12 KB) and of the recent-call blocks that
// only f and earlier frames show (12.5 KiB each) instead of allocating:
// most of what a refresh allocates. After Recycle the ranks of f, the
// recent calls of f and of earlier frames, and whatever points into them
// (Frame.Vars' ByRank, pointers to a Rank's fields) may change at any
// time. Ranks of the last poll (a frame given back before its successor
// was made) are kept.
func (p *Poller) Recycle(f *Frame) {
	if f == nil || f.poll == 0 {
		return
	}
	p.blocks.release(f.poll)
	for _, r := range f.Ranks {
		if t := p.ranks[r.Path]; t != nil && t.made != r && t.spareRank == nil {
			t.spareRank = r
		}
	}
}

// Recorded is one segment at one poll as ddtop record keeps it: the
// snapshot, the ring records read since the previous poll and how many
// were lost before they could be read.
type Recorded struct {
	Snap    *telemetry.Snapshot `json:"snapshot"`
	Calls   []telemetry.Record  `json:"calls"`
	Dropped uint64              `json:"dropped"`
}

// Feed makes the frame of one recorded poll at time at, as Poll would have
// from the live segments (ddtop replay and report): segments missing since
// the last Feed are forgotten, a new incarnation starts afresh.
func (p *Poller) Feed(at time.Time, segs []Recorded) *Frame {
	f := &Frame{At: at, Dir: p.o.Dir}
	seen := map[string]bool{}
	for _, rs := range segs {
		s := rs.Snap
		if s == nil || p.o.Job != "" && s.Job != p.o.Job {
			continue
		}
		seen[s.Path] = true
		t := p.ranks[s.Path]
		if t == nil || t.startNs != s.StartNs {
			t = &tracked{startNs: s.StartNs, rowsHist: newRing(p.o.History), bytesHist: newRing(p.o.History)}
			p.ranks[s.Path] = t
		}
		r := p.diff(t, s.Path, s, at)
		t.dropped += rs.Dropped
		t.recent.add(rs.Calls, p.o.Recent)
		r.Recent = t.recent.view()
		r.Dropped = t.dropped
		f.Ranks = append(f.Ranks, r)
	}
	for path := range p.ranks {
		if !seen[path] {
			delete(p.ranks, path)
		}
	}
	p.finish(f)
	return f
}

// finish orders a frame's ranks and sums its variables.
func (p *Poller) finish(f *Frame) {
	sort.Slice(f.Ranks, func(i, j int) bool {
		a, b := f.Ranks[i], f.Ranks[j]
		if a.Job != b.Job {
			return a.Job < b.Job
		}
		if a.Rank != b.Rank {
			return a.Rank < b.Rank
		}
		return a.Path < b.Path
	})
	f.Vars = aggregateVars(f.Ranks)
}

// openSegment is the segment open at path, nil if none.
func (p *Poller) openSegment(path string) *telemetry.Segment {
	if t := p.ranks[path]; t != nil {
		return t.seg
	}
	return nil
}

// transient reports errors of a segment being created (not ready yet) or
// removed (its writer closed between listing and opening): not worth a
// warning, the next refresh settles them.
func transient(err error) bool {
	return errors.Is(err, telemetry.ErrNotReady) || errors.Is(err, fs.ErrNotExist)
}

// sample snapshots one segment and diffs it against the previous snapshot.
func (p *Poller) sample(t *tracked, in telemetry.SegmentInfo, now time.Time) (*Rank, error) {
	// The snapshot before the previous one is no longer used (a Rank
	// copies what it shows): its memory takes the new one, unless frames
	// keep their snapshots (KeepRaw).
	s := t.spare
	t.spare = nil
	if s == nil {
		s = new(telemetry.Snapshot)
	}
	if err := t.seg.SnapshotTo(s); err != nil {
		return nil, err
	}
	old := t.prev
	r := p.diff(t, in.Path, s, now)
	if p.o.KeepRaw {
		t.raw = &Recorded{Snap: s}
	} else {
		t.spare = old
	}
	p.readRing(t, s)
	r.Recent = t.recent.view()
	r.Dropped = t.dropped
	return r, nil
}

// diff turns snapshot s of the segment at path into a Rank, against the
// previous snapshot t holds, and makes s the previous one.
func (p *Poller) diff(t *tracked, path string, s *telemetry.Snapshot, now time.Time) *Rank {
	var iv time.Duration
	prev := t.prev
	if prev != nil {
		iv = now.Sub(t.prevAt)
		if iv <= 0 {
			prev, iv = nil, 0
		}
	}
	r := t.spareRank // a recycled Rank, if any: its memory is reused
	t.spareRank = nil
	if r == nil {
		r = new(Rank)
	}
	peers, vars, readers := r.Peers, r.Vars, r.Readers
	*r = Rank{
		Path: path, Job: s.Job, Host: s.Host, Rank: s.Rank, World: s.World, Pid: s.Pid,
		State: s.State, HeartbeatAge: s.HeartbeatAge, Start: s.Start(),
		Provider: s.Provider, ReaderMode: s.ReaderMode, Method: s.Method,
		Loader:   LoaderStat{Total: s.Loader, Interval: iv},
		BadCalls: s.BadVarCalls + s.BadReaderCalls,
		Version:  s.Version, Proc: s.Proc, ExitedAt: t.sawState(s.State, now),
	}
	t.made = r
	// Slices of their final size: a refresh of many ranks allocates each
	// once rather than growing it (or not at all, recycled).
	nr := 0
	for vi := range s.Vars {
		for ri := range s.Vars[vi].Readers {
			if s.Vars[vi].Readers[ri].Calls != 0 {
				nr++
			}
		}
	}
	r.Peers = emptyWithRoom(peers, len(s.Peers))
	r.Vars = emptyWithRoom(vars, len(s.Vars))
	r.Readers = emptyWithRoom(readers, nr)
	for _, pc := range s.Peers {
		ps := PeerStat{Total: pc, Interval: iv}
		if prev != nil {
			var pp telemetry.PeerCounters
			if q := prev.Peer(pc.Rank); q != nil {
				pp = *q
			}
			if d := pc.Sub(pp); d.Calls >= 0 && d.Rows >= 0 && d.Ns >= 0 && d.Errors >= 0 {
				ps.Delta = d
			}
		}
		r.Peers = append(r.Peers, ps)
	}
	r.Stat.Interval = iv
	if prev != nil {
		if d := s.Loader.Sub(prev.Loader); d.Batches >= 0 && d.WaitNs >= 0 && d.StepNs >= 0 {
			r.Loader.Delta = d
		}
	}
	r.varNames = t.names(s)
	for vi := range s.Vars {
		v := &s.Vars[vi]
		var pv *telemetry.VarSnapshot
		if prev != nil {
			for j := range prev.Vars {
				if prev.Vars[j].ID == v.ID && prev.Vars[j].Generation == v.Generation {
					pv = &prev.Vars[j]
					break
				}
			}
		}
		// Filled in place (the slices were sized above): a Stat is two
		// 760-byte counter blocks, not worth copying around.
		r.Vars = append(r.Vars, VarOnRank{Name: v.Name, DType: v.DType, RowBytes: v.RowBytes, GlobalRows: v.GlobalRows,
			LocalRows: v.LocalRows, Rank: r.Rank, Host: r.Host, Path: r.Path})
		vr := &r.Vars[len(r.Vars)-1]
		vr.Stat.Interval = iv
		for ri := range v.Readers {
			cur := &v.Readers[ri]
			if cur.Calls == 0 {
				continue
			}
			r.Readers = append(r.Readers, ReaderStat{Var: v.Name, Reader: ri})
			rs := &r.Readers[len(r.Readers)-1]
			rs.Stat.Total = *cur
			rs.Stat.Interval = iv
			if prev != nil {
				pc := &noCounters
				if pv != nil && ri < len(pv.Readers) {
					pc = &pv.Readers[ri]
				}
				diff(&rs.Stat.Delta, cur, pc)
			}
			vr.Stat.add(&rs.Stat)
		}
		r.Stat.add(&vr.Stat)
	}
	r.Stat.Interval = iv
	if iv > 0 {
		t.rowsHist.push(r.Stat.RowsPerSec())
		t.bytesHist.push(r.Stat.BytesPerSec())
	}
	r.RowsHistory = t.rowsHist.values()
	r.BytesHistory = t.bytesHist.values()
	t.prev, t.prevAt = s, now
	return r
}

// sawState notes the writer's state at time now and returns when it was
// first seen exited (zero when it is not exited).
func (t *tracked) sawState(state string, now time.Time) time.Time {
	switch {
	case state != telemetry.StateExited:
		t.exitedAt = time.Time{}
	case t.exitedAt.IsZero():
		t.exitedAt = now
	}
	return t.exitedAt
}

// emptyWithRoom is s emptied when it has room for n elements, else a new
// slice with that room.
func emptyWithRoom[T any](s []T, n int) []T {
	if s != nil && cap(s) >= n {
		return s[:0]
	}
	return make([]T, 0, n)
}

// noCounters is a stripe that saw no call.
var noCounters telemetry.Counters

// names maps the variable ids of s to their names: the map of the
// previous snapshot when they are the same (Ranks share it, read only).
func (t *tracked) names(s *telemetry.Snapshot) map[int32]string {
	if t.varNames != nil && len(t.varNames) == len(s.Vars) {
		same := true
		for i := range s.Vars {
			if n, ok := t.varNames[int32(s.Vars[i].ID)]; !ok || n != s.Vars[i].Name {
				same = false
				break
			}
		}
		if same {
			return t.varNames
		}
	}
	m := make(map[int32]string, len(s.Vars))
	for i := range s.Vars {
		m[int32(s.Vars[i].ID)] = s.Vars[i].Name
	}
	t.varNames = m
	return m
}

// readRing reads the calls recorded since the last poll. The first read
// starts Recent records before each ring's head, so drops count only
// losses that happen while ddtop watches.
func (p *Poller) readRing(t *tracked, s *telemetry.Snapshot) {
	if p.o.NoCalls {
		return
	}
	keep := p.o.Recent
	if !t.started {
		t.started = true
		if t.seg.TailRings(&t.cursor, uint64(keep)) != nil {
			return
		}
	}
	if p.hideCalls.Load() && t.raw == nil {
		// Nothing on screen shows calls, so records passed over are not
		// lost to anyone (a fast healthy job is no ring_drops finding on
		// the ranks page), and the rings are not touched at all.
		t.skipped = true
		return
	}
	if t.skipped {
		// Back on a page that shows calls: read what the rings still
		// hold after the last record read before skipping, at most the
		// last keep of each, without counting what was passed over.
		t.skipped = false
		var tail telemetry.RingCursor
		if t.seg.TailRings(&tail, uint64(keep)) == nil {
			for i := range t.seg.Rings() {
				t.cursor.Pos[i] = max(tail.Pos[i], t.readTo.Pos[i])
			}
		}
	}
	limit := 64 * min(keep, 1024) // a refresh never chases a fast writer forever
	for read := 0; read < limit; {
		dst := t.recent.room(&p.blocks) // past every returned frame's calls
		n, dropped, err := t.seg.ReadRings(&t.cursor, dst)
		t.dropped += dropped
		t.readTo = t.cursor
		if t.raw != nil {
			t.raw.Dropped += dropped
			t.raw.Calls = append(t.raw.Calls, dst[:n]...)
		}
		if err != nil || n == 0 {
			break
		}
		t.recent.took(n, keep, &p.blocks, p.polls)
		read += n
		if n < len(dst) {
			break
		}
	}
}

// aggregateVars sums each variable (by name) over the ranks.
func aggregateVars(ranks []*Rank) []*Var {
	byName := map[string]*Var{}
	var out []*Var
	for _, r := range ranks {
		for _, vr := range r.Vars {
			if byName[vr.Name] == nil {
				v := &Var{Name: vr.Name, DType: vr.DType, RowBytes: vr.RowBytes, GlobalRows: vr.GlobalRows}
				v.ByRank = make([]*VarOnRank, 0, len(ranks))
				byName[vr.Name] = v
				out = append(out, v)
			}
		}
	}
	for _, r := range ranks {
		for i := range r.Vars {
			vr := &r.Vars[i]
			v := byName[vr.Name]
			v.Stat.add(&vr.Stat)
			v.ByRank = append(v.ByRank, vr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ring keeps the last n float values. values shares its backing array
// with the frames already returned: push only appends past every returned
// slice's end, and moves to a new array (the last n-1 values, room for n
// more) when the array is full, so it copies once per n pushes, not per
// poll.
type ring struct {
	n int
	v []float64 // the last min(pushed, n) values, oldest first
}

func newRing(n int) ring { return ring{n: n} }

func (r *ring) push(x float64) {
	if r.n <= 0 {
		return
	}
	if len(r.v) == cap(r.v) {
		nv := make([]float64, 0, 2*r.n)
		if len(r.v) > 0 {
			nv = append(nv, r.v[max(len(r.v)-r.n+1, 0):]...)
		}
		r.v = nv
	}
	r.v = append(r.v, x)
	if len(r.v) > r.n {
		r.v = r.v[len(r.v)-r.n:]
	}
}

// values returns the values, oldest first; the caller must not modify
// them (they are shared with later frames' slices, never written again).
func (r *ring) values() []float64 { return r.v[:len(r.v):len(r.v)] }

// VarName names var id of this rank's segment, or "#id" when unknown.
func (r *Rank) VarName(id int32) string {
	if n, ok := r.varNames[id]; ok {
		return n
	}
	return "#" + strconv.Itoa(int(id))
}
