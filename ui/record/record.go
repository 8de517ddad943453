// Package record owns ddtop's recording format (.ddrec, documented in
// FORMAT.md beside this file): Record polls a telemetry directory at an
// interval and writes every segment's snapshot and the ring records read
// since the previous poll; Load reads a recording back; Frames turns it into
// the same frames (ui/data) that a live ddtop shows, for replay and report.
package record

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ddstore/ddstore/ui/data"
)

// Format and Version name the format in every recording's first line.
const (
	Format  = "ddrec"
	Version = 1
)

// Header is the first line of a recording.
type Header struct {
	Format     string    `json:"format"`  // "ddrec"
	Version    int       `json:"version"` // 1
	Created    time.Time `json:"created"`
	Dir        string    `json:"dir"`
	Job        string    `json:"job,omitempty"`
	IntervalNs int64     `json:"interval_ns"`
	Host       string    `json:"host,omitempty"` // where ddtop recorded
}

// Tick is one poll: every segment seen, with the calls read since the
// previous tick.
type Tick struct {
	TimeNs   int64           `json:"t"` // unix ns of the poll
	Segments []data.Recorded `json:"segments"`
	Problems []string        `json:"problems,omitempty"`
}

// Time is TimeNs as a time.
func (t *Tick) Time() time.Time { return time.Unix(0, t.TimeNs) }

// Recording is a loaded .ddrec file.
type Recording struct {
	Header
	Ticks []Tick
}

// ErrFormat reports a file that is not a readable recording.
var ErrFormat = errors.New("ddtop: not a ddtop recording")

// Options configure Record.
type Options struct {
	Dir      string        // telemetry directory; default /dev/shm
	Job      string        // only this job's segments; "" = all
	Interval time.Duration // time between polls; default 1s
	// Until stops the recording once no segment has been seen for this
	// long after at least one was (the job ended); 0 = only ctx ends it.
	Until time.Duration
	Now   func() time.Time // default time.Now (tests)
}

// Record polls o.Dir every o.Interval and writes each tick to w (gzip,
// one JSON object per line) until ctx ends or the job is over (see
// Options.Until). It returns the number of ticks written.
func Record(ctx context.Context, w io.Writer, o Options) (int, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p, err := data.NewPoller(data.Options{Dir: o.Dir, Job: o.Job, KeepRaw: true, Recent: 4096, Now: o.Now})
	if err != nil {
		return 0, err
	}
	defer p.Close()
	zw := gzip.NewWriter(w)
	bw := bufio.NewWriterSize(zw, 1<<16)
	enc := json.NewEncoder(bw)
	host, _ := os.Hostname()
	if err := enc.Encode(Header{Format: Format, Version: Version, Created: o.Now(), Dir: p.Dir(), Job: o.Job,
		IntervalNs: o.Interval.Nanoseconds(), Host: host}); err != nil {
		return 0, err
	}
	ticks := 0
	var seen, lastSeen time.Time
	tk := time.NewTicker(o.Interval)
	defer tk.Stop()
	for {
		f, err := p.Poll()
		if err != nil {
			return ticks, err
		}
		if err := enc.Encode(Tick{TimeNs: f.At.UnixNano(), Segments: f.Raw, Problems: f.Problems}); err != nil {
			return ticks, fmt.Errorf("ddtop record: write: %w", err)
		}
		ticks++
		if err := bw.Flush(); err != nil { // a tick at a time: a killed recorder loses at most the gzip tail
			return ticks, fmt.Errorf("ddtop record: write: %w", err)
		}
		if len(f.Raw) > 0 {
			lastSeen = f.At
			if seen.IsZero() {
				seen = f.At
			}
		} else if o.Until > 0 && !seen.IsZero() && f.At.Sub(lastSeen) >= o.Until {
			break
		}
		select {
		case <-ctx.Done():
			return ticks, zw.Close()
		case <-tk.C:
		}
	}
	return ticks, zw.Close()
}

// Load reads a recording. A recording cut short (the recorder was killed)
// loads up to its last complete tick; one cut short before its first
// complete tick is refused with an ErrFormat that says "truncated" and
// wraps io.ErrUnexpectedEOF (or gzip.ErrChecksum).
func Load(path string) (*Recording, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ddtop: open recording: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFormat, path, err)
	}
	dec := json.NewDecoder(zr)
	rec := &Recording{}
	if err := dec.Decode(&rec.Header); err != nil {
		if cutShort(err) {
			return nil, fmt.Errorf("%w: %s: truncated: cut short in the header: %w", ErrFormat, path, err)
		}
		return nil, fmt.Errorf("%w: %s: header: %v", ErrFormat, path, err)
	}
	if rec.Format != Format {
		return nil, fmt.Errorf("%w: %s: format %q", ErrFormat, path, rec.Format)
	}
	if rec.Version < 1 || rec.Version > Version {
		return nil, fmt.Errorf("%w: %s has version %d; this ddtop reads version %d: upgrade ddtop", ErrFormat, path, rec.Version, Version)
	}
	for {
		var t Tick
		err := dec.Decode(&t)
		if err == io.EOF {
			break
		}
		if err != nil {
			if cutShort(err) {
				if len(rec.Ticks) > 0 {
					break // cut short: keep what is complete
				}
				return nil, fmt.Errorf("%w: %s: truncated: cut short before the first complete tick: %w", ErrFormat, path, err)
			}
			return nil, fmt.Errorf("%w: %s: tick %d: %v", ErrFormat, path, len(rec.Ticks), err)
		}
		rec.Ticks = append(rec.Ticks, t)
	}
	if len(rec.Ticks) == 0 {
		return nil, fmt.Errorf("%w: %s holds no tick", ErrFormat, path)
	}
	return rec, nil
}

// cutShort reports whether a read error means the file ends early (the
// recorder was killed mid-write) rather than holding bad data.
func cutShort(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrChecksum)
}

// Frames turns the recording into the frames a live ddtop would have
// shown at each tick (rates over the interval between ticks).
func (r *Recording) Frames() []*data.Frame {
	p, _ := data.NewPoller(data.Options{Dir: r.Dir, Recent: 256})
	out := make([]*data.Frame, 0, len(r.Ticks))
	for i := range r.Ticks {
		t := &r.Ticks[i]
		f := p.Feed(t.Time(), t.Segments)
		f.Problems = t.Problems
		out = append(out, f)
	}
	return out
}
