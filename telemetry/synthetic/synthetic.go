// Package synthetic writes the telemetry of a synthetic training job: the
// load under which ddtop's cost is measured (examples/ddtopcost and the ui
// and serve benchmarks), defined once for all of them. Only the segments
// are real; no store is read.
package synthetic

import (
	"errors"
	"fmt"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

// Options of a Job. Zero fields take the defaults.
type Options struct {
	Dir   string // segment directory; default telemetry's ("/dev/shm")
	Job   string // job name; default "synthetic"
	Ranks int    // segments, one per rank; default 64
	// Host recorded in every segment; "" is this host, so a reader checks
	// that the writer (this process) is alive.
	Host string
	// Heartbeat is each writer's heartbeat period; 0 starts none.
	Heartbeat time.Duration
}

// Job is the segments of Ranks ranks of one job. Each rank has two
// variables, "image" (3136-byte float32 rows) and "label" (8-byte int64
// rows), 1024 rows a rank, and a loader of 2 thread-reader workers with
// prefetch 4 and 32-row batches.
type Job struct {
	Writers []*telemetry.Writer
	vars    [][2]int32
	calls   []int // calls recorded so far, per rank
}

// New creates the job's segments.
func New(o Options) (*Job, error) {
	if o.Job == "" {
		o.Job = "synthetic"
	}
	if o.Ranks == 0 {
		o.Ranks = 64
	}
	if o.Ranks < 0 {
		return nil, fmt.Errorf("synthetic: %d ranks", o.Ranks)
	}
	j := &Job{vars: make([][2]int32, o.Ranks), calls: make([]int, o.Ranks)}
	rows := int64(o.Ranks) * 1024
	for r := range o.Ranks {
		w, err := telemetry.Create(telemetry.WriterOptions{Dir: o.Dir, Job: o.Job, Rank: r, World: o.Ranks, Host: o.Host,
			Provider: "tcp;ofi_rxm", ReaderMode: "thread", Method: "tcp"})
		if err != nil {
			return nil, errors.Join(err, j.Close())
		}
		j.Writers = append(j.Writers, w)
		image, err1 := w.AddVar("image", "float32", 3136, rows, 1024)
		label, err2 := w.AddVar("label", "int64", 8, rows, 1024)
		if err := errors.Join(err1, err2); err != nil {
			return nil, errors.Join(err, j.Close())
		}
		j.vars[r] = [2]int32{int32(image), int32(label)}
		w.SetLoaderConfig(telemetry.LoaderConfig{Workers: 2, Prefetch: 4, Readers: telemetry.LoaderReadersThread, BatchRows: 32})
		if o.Heartbeat > 0 {
			w.StartHeartbeat(o.Heartbeat)
		}
	}
	return j, nil
}

// Record records n calls on every rank. A call reads a 32-row batch of
// image and label in turn, on reader 1 or 2: 8 rows from its own rank and
// 12 from each of the next two, in 51–57 µs of phases (CQ wait, posting,
// copy). Every second call completes a loader batch: 0.2 ms of wait in a
// 20 ms step.
func (j *Job) Record(n int) {
	ranks := len(j.Writers)
	for r, w := range j.Writers {
		for range n {
			k := j.calls[r]
			c := telemetry.Call{Var: j.vars[r][k%2], Reader: int32(1 + k%2), Rows: 32, Bytes: 32 * 3136, RemoteRows: 24, LocalRows: 8}
			if k%2 == 1 {
				c.Bytes = 32 * 8
			}
			c.Targets.Add(r, 8)
			c.Targets.Add((r+1)%ranks, 12)
			c.Targets.Add((r+2)%ranks, 12)
			c.Phases[telemetry.PhaseCQWait] = 40_000 + int64(k%7)*1000
			c.Phases[telemetry.PhasePost] = 8_000
			c.Phases[telemetry.PhaseCopy] = 3_000
			w.Record(&c)
			if k%2 == 1 {
				w.RecordLoader(200_000, 20_000_000)
			}
			j.calls[r] = k + 1
		}
	}
}

// Close closes every writer, which removes its segment.
func (j *Job) Close() error {
	var errs []error
	for _, w := range j.Writers {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}
