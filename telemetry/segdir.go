package telemetry

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// SegmentDir lists the segments of one directory for a viewer that lists
// it many times a second and keeps segments open (ddtop, ddtop serve).
// It reads the directory and takes every segment file's identity (one
// lstat each) only when the directory may have changed; otherwise a
// listing costs one stat of the directory:
//
//   - Creating, removing or renaming a file sets the directory's
//     modification time, so while it stays the same the names and the
//     files behind them (device, inode) are those of the last reading.
//   - Timestamps are coarse (a clock tick): a change made just after a
//     reading can leave the time the reading saw. So a directory changed
//     less than dirSettle before it was read is read again every time,
//     until a reading starts dirSettle after its last change.
//   - Whatever the time says, it is read again at least every dirRelist.
//
// Segments are then described as DiscoverOpen does: a file that is still
// the one open(path) maps from the mapping, any other from its header
// (which also follows a segment that becomes ready in place). A
// SegmentDir is not safe for concurrent use.
type SegmentDir struct {
	dir      string
	listed   bool
	dirInfo  os.FileInfo // the directory at the last reading
	readAt   time.Time   // when the last reading started (reader clock)
	segments []dirEntry  // segment files of the last reading, by name
}

// dirEntry is one segment file of a reading: its path and identity (nil
// when it could not be taken).
type dirEntry struct {
	path string
	file os.FileInfo
}

// dirSettle is how long after its last change a directory must have been
// read for its modification time to vouch for the reading: far more than a
// filesystem clock tick.
const dirSettle = 100 * time.Millisecond

// dirRelist bounds how long a reading is trusted at all (a variable for
// the test). ddtop serve, scraped every few seconds, reads the directory
// at most once per dirRelist too.
var dirRelist = 10 * time.Second

// NewSegmentDir follows the segments in dir.
func NewSegmentDir(dir string) *SegmentDir { return &SegmentDir{dir: dir} }

// Dir is the directory followed.
func (d *SegmentDir) Dir() string { return d.dir }

// Discover lists the segments ("ddstore-*.tel") sorted by job and rank,
// with their liveness, as DiscoverOpen(d.Dir(), open) does.
func (d *SegmentDir) Discover(open func(path string) *Segment) ([]SegmentInfo, error) {
	return d.AppendDiscover(nil, open)
}

// AppendDiscover is Discover appending to dst (a viewer that polls often
// passes the last result's memory, [:0]); what was in dst stays first, and
// only the appended part is sorted.
func (d *SegmentDir) AppendDiscover(dst []SegmentInfo, open func(path string) *Segment) ([]SegmentInfo, error) {
	if err := d.read(); err != nil {
		return dst, err
	}
	out := slices.Grow(dst, len(d.segments))
	from := len(out)
	for _, e := range d.segments {
		if open != nil && e.file != nil {
			if seg := open(e.path); seg != nil && seg.file != nil && os.SameFile(e.file, seg.file) {
				if info, err := seg.Info(); err == nil {
					out = append(out, info)
					continue
				}
			}
		}
		info, _ := inspect(e.path)
		out = append(out, info)
	}
	slices.SortFunc(out[from:], func(a, b SegmentInfo) int {
		if a.Job != b.Job {
			return strings.Compare(a.Job, b.Job)
		}
		if a.Rank != b.Rank {
			return a.Rank - b.Rank
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out, nil
}

// read reads the directory again unless the last reading still holds.
func (d *SegmentDir) read() error {
	now := time.Now()
	st, err := os.Stat(d.dir)
	if err != nil {
		d.listed = false
		return fmt.Errorf("telemetry: list segments in %s: %w", d.dir, err)
	}
	if d.listed && os.SameFile(st, d.dirInfo) && st.ModTime().Equal(d.dirInfo.ModTime()) &&
		d.readAt.Sub(st.ModTime()) >= dirSettle && now.Sub(d.readAt) >= 0 && now.Sub(d.readAt) < dirRelist {
		return nil
	}
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		d.listed = false
		return fmt.Errorf("telemetry: list segments in %s: %w", d.dir, err)
	}
	d.segments = d.segments[:0]
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, SegmentPrefix) || !strings.HasSuffix(name, SegmentSuffix) || e.IsDir() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			fi = nil
		}
		d.segments = append(d.segments, dirEntry{path: filepath.Join(d.dir, name), file: fi})
	}
	d.listed, d.dirInfo, d.readAt = true, st, now
	return nil
}
