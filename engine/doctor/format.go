package doctor

// The report for people: one section per probe, then the findings.

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes rep as tables for people.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, a ...any) { fmt.Fprintf(tw, format+"\n", a...) }
	p("ddstore doctor on %s (config %s), %.1fs", rep.Host, rep.Config, rep.Took)
	p("")
	if rep.Library.Found {
		p("libfabric %s\t%s", rep.Library.Version, rep.Library.Path)
	} else {
		p("libfabric\tNOT FOUND: %s", rep.Library.Error)
	}
	if len(rep.Providers) > 0 {
		p("PROVIDER\tDOMAIN\tRMA\tHMEM\tMR MODE\tPROGRESS\tTHREADING\tTX\tMAX MSG")
		for _, pv := range rep.Providers {
			rma := "hardware"
			if pv.SoftwareRMA {
				rma = "software"
			}
			prog := "auto"
			if pv.ManualProgress {
				prog = "manual"
			}
			mr := strings.Join(pv.MRMode, ",")
			if mr == "" {
				mr = "-"
			}
			p("%s\t%s\t%s\t%v\t%s\t%s\t%s\t%d\t%s", pv.Provider, pv.Domain, rma, pv.HMEM, mr, prog, pv.Threading, pv.TxSize, bytesStr(int64(pv.MaxMsgSize)))
		}
	}
	if rep.Pick.Error != "" {
		p("engine's pick\tNONE: %s", rep.Pick.Error)
	} else if rep.Library.Found {
		p("engine's pick\t%s on %s: %s", rep.Pick.Provider, rep.Pick.Domain, rep.Pick.Why)
	}
	p("")
	l := rep.Limits
	p("memlock\t%s (hard %s)", bytesStr(l.MemlockSoft), bytesStr(l.MemlockHard))
	p("%s\t%s free of %s", l.ShmDir, bytesStr(l.ShmFree), bytesStr(l.ShmSize))
	p("hugepages\t%d free of %d (%s each)", l.HugePagesFree, l.HugePagesTotal, bytesStr(l.HugePageBytes))
	p("CPUs\t%d (%s)", l.CPUCount, l.CPUs)
	p("cgroup\tcpu.max %s, memory.max %s", orNone(l.CgroupCPUMax), orNone(l.CgroupMemMax))
	p("")
	if len(rep.Reads) > 0 {
		p("READS (2 processes)\tDOMAIN\tROW\t1 READ µs\t%s µs/row\tGB/s\tGATHER µs/row\t1 MiB ROWS GB/s\tREGISTER µs/MiB\tROWS CHECKED", "BATCH")
		for _, r := range rep.Reads {
			if r.Error != "" {
				p("%s\t%s\tFAILED: %s", r.Provider, r.Domain, r.Error)
				continue
			}
			g := "-"
			if r.GatherUsPerRow > 0 {
				g = fmt.Sprintf("%.2f", r.GatherUsPerRow)
			}
			p("%s\t%s\t%d\t%.1f\t%.2f (%d in flight)\t%.2f\t%s\t%.2f\t%.2f\t%d", r.Provider, r.Domain, r.RowBytes, r.LatencyUs,
				r.BatchUsPerRow, r.Window, r.BatchGBps, g, r.BigRowGBps, r.MRUsPerMiB, r.Rows)
		}
		p("")
	}
	p("INTERFACE\tSTATE\tMTU\tNUMA\tPCI\tROLE\tADDRESSES")
	for _, i := range rep.Interfaces {
		st := "down"
		if i.Up {
			st = "up"
		}
		if i.Loopback {
			st += ",loopback"
		}
		var role []string
		if i.Fabric {
			role = append(role, "fabric domain")
		}
		if i.Route {
			role = append(role, "default route")
		}
		p("%s\t%s\t%d\t%s\t%s\t%s\t%s", i.Name, st, i.MTU, numaStr(i.NUMA), orNone(i.PCI), orNone(strings.Join(role, ", ")), strings.Join(i.Addrs, " "))
	}
	for _, n := range rep.NUMA {
		p("NUMA node %d\tCPUs %s", n.Node, n.CPUs)
	}
	p("")
	if len(rep.GPUs.Devices) == 0 {
		why := rep.GPUs.Error
		if rep.GPUs.NoLib {
			why = "no CUDA or HIP driver library (libcuda.so.1, libamdhip64.so) loads"
		}
		p("GPUs\tnone: %s", why)
	} else {
		p("GPUs\t%d, %s driver %s (%s)", len(rep.GPUs.Devices), rep.GPUs.Runtime, rep.GPUs.Driver, rep.GPUs.Library)
		p("GPU\tNAME\tMEMORY\tPCI\tNUMA\tNEAREST NIC")
		for _, g := range rep.GPUs.Devices {
			p("%d\t%s\t%.1f GiB\t%s\t%s\t%s", g.Index, g.Name, float64(g.Memory)/(1<<30), g.PCI, numaStr(g.NUMA), orNone(g.NIC))
		}
	}
	p("")
	if len(rep.Findings) == 0 {
		p("findings\tnone")
	} else {
		p("FINDINGS (worst first)")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s: %s\n    fix: %s", f.Rule, f.Evidence, f.Fix)
		if f.Key != "" {
			fmt.Fprintf(w, " [config %s", f.Key)
			if f.Env != "" {
				fmt.Fprintf(w, ", env %s", f.Env)
			}
			fmt.Fprint(w, "]")
		}
		fmt.Fprintln(w)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func numaStr(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
