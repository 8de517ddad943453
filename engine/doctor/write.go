package doctor

// The machine config the doctor writes from what it measured, in the
// configs schema (keys not written keep local.yaml's defaults when it is
// loaded). It is checked by loading it with configs.Load before it is kept.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ddstore/ddstore/configs"
)

// Tuned is what the doctor recommends for this machine, with why.
type Tuned struct {
	Name          string
	GPU           string
	Provider      string
	Iface         string
	Window        int
	ReadMode      string
	GatherBytes   int64
	ThreadReaders bool
	Workers       int
	Prefetch      int               // configs.PrefetchAuto: the loader chooses its depth
	Why           map[string]string // config key → why this value
}

// Tune decides the machine config from a report (pure).
func Tune(rep *Report) Tuned {
	t := Tuned{Name: "doctor-" + rep.Host, GPU: "auto", Window: 128, ReadMode: "auto", GatherBytes: 2 << 20,
		ThreadReaders: true, Workers: 1, Prefetch: configs.PrefetchAuto, Why: map[string]string{}}
	if len(rep.GPUs.Devices) > 0 {
		t.GPU = rep.GPUs.Runtime
		t.Why["machine.gpu"] = fmt.Sprintf("%d %s devices opened", len(rep.GPUs.Devices), rep.GPUs.Runtime)
	} else {
		t.Why["machine.gpu"] = "no GPU opened here; auto tries CUDA, then HIP, at the first device read"
	}
	// Provider: the first that read correctly between two processes, the
	// engine's pick first; shm only carries reads within a node, so it is
	// the last resort.
	var best *Reads
	for i := range rep.Reads {
		r := &rep.Reads[i]
		if r.Error != "" {
			continue
		}
		if best == nil || best.Provider == "shm" && r.Provider != "shm" {
			best = r
		}
	}
	if best != nil {
		t.Provider = best.Provider
		t.Why["fabric.provider"] = fmt.Sprintf("reads checked between two processes: %.1f µs single, %.2f µs/row batched", best.LatencyUs, best.BatchUsPerRow)
		if best.Provider == rep.Pick.Provider {
			t.Why["fabric.provider"] += "; the engine's pick (" + rep.Pick.Why + ")"
		}
		for _, pv := range rep.Providers {
			if pv.Provider == best.Provider && pv.TxSize > 0 && pv.TxSize < t.Window {
				t.Window = pv.TxSize
			}
		}
		t.Why["fabric.window"] = fmt.Sprintf("128 reads in flight, at most the provider's transmit queue (%s)", best.Provider)
		if best.GatherUsPerRow > 0 {
			if best.GatherUsPerRow <= best.BatchUsPerRow {
				t.Why["reads.mode"] = fmt.Sprintf("gather %.2f µs/row <= fi_read %.2f µs/row for 3 KB rows: batches of small rows gather", best.GatherUsPerRow, best.BatchUsPerRow)
			} else {
				t.ReadMode = "rma"
				t.Why["reads.mode"] = fmt.Sprintf("fi_read %.2f µs/row < gather %.2f µs/row for 3 KB rows", best.BatchUsPerRow, best.GatherUsPerRow)
			}
		} else {
			t.Why["reads.mode"] = "hardware RMA: every batch uses fi_read"
		}
	} else {
		t.Provider = rep.Pick.Provider
		t.Why["fabric.provider"] = "no read probe passed; the engine's pick"
	}
	if strings.HasPrefix(t.Provider, "tcp") || strings.HasPrefix(t.Provider, "sockets") {
		for _, i := range rep.Interfaces {
			if i.Route && i.Up && !i.Loopback {
				t.Iface = i.Name
				t.Why["fabric.iface"] = fmt.Sprintf("carries the default route (the path to other hosts), MTU %d", i.MTU)
			}
		}
	}
	if t.Iface == "" {
		t.Why["fabric.iface"] = "the interface of the ranks' own connections across hosts, else the provider's first domain"
	}
	t.Why["exchange.alltoall_max_bytes"] = "2 MiB gather rounds (the seed found 2-8 MiB best)"
	if rep.Limits.CPUCount >= 8 {
		t.Workers = 2
	}
	t.Why["loader.workers"] = fmt.Sprintf("%d CPUs: one worker (two from 8 CPUs) hides the fetch; each owns a reader", rep.Limits.CPUCount)
	// The depth that hides a fetch depends on the job's step time, which
	// the doctor cannot know: the loader measures both and chooses
	// (between the workers and engine.MaxAutoPrefetch; the schema has no
	// bound key, so none is written).
	t.Why["loader.prefetch"] = "auto: the loader chooses its depth from the fetch and step times it measures"
	return t
}

// Config is the YAML text of t: each key under its section, after the
// comment that says why it has its value.
func (t Tuned) Config(rep *Report) []byte {
	prefetch := strconv.Itoa(t.Prefetch)
	if t.Prefetch == configs.PrefetchAuto {
		prefetch = "auto"
	}
	keys := []struct{ key, value string }{
		{"machine.name", strconv.Quote(t.Name)},
		{"machine.gpu", t.GPU},
		{"fabric.provider", strconv.Quote(t.Provider)},
		{"fabric.iface", strconv.Quote(t.Iface)},
		{"fabric.window", strconv.Itoa(t.Window)},
		{"reads.mode", t.ReadMode},
		{"reads.thread_readers", strconv.FormatBool(t.ThreadReaders)},
		{"exchange.alltoall_max_bytes", fmt.Sprintf("%dMiB", t.GatherBytes>>20)},
		{"loader.workers", strconv.Itoa(t.Workers)},
		{"loader.prefetch", prefetch},
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# ddstore machine config written by the doctor on %s (%s).\n", rep.Host, rep.Config)
	b.WriteString("# Load it with --config FILE or DDSTORE_CONFIG=FILE; keys not here keep\n")
	b.WriteString("# local.yaml's defaults, and DDSTORE_* variables still override each key.\n")
	section := ""
	for _, k := range keys {
		sec, name, _ := strings.Cut(k.key, ".")
		if sec != section {
			fmt.Fprintf(&b, "\n%s:\n", sec)
			section = sec
		}
		if why := t.Why[k.key]; why != "" {
			fmt.Fprintf(&b, "  # %s\n", why)
		}
		fmt.Fprintf(&b, "  %s: %s\n", name, k.value)
	}
	return b.Bytes()
}

// WriteConfig writes the machine config tuned from rep to path, and keeps
// it only when configs.Load accepts it.
func (rep *Report) WriteConfig(path string) error {
	data := Tune(rep).Config(rep)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp.yaml")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if _, err := configs.Load(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("the written config does not load: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}
