package ui

import (
	"fmt"
	"math"
	"time"
)

// si formats a count or rate with k/M/G suffixes in at most ~6 cells.
func si(v float64) string {
	a := math.Abs(v)
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case a == 0:
		return "0"
	case below(a, 10, 2):
		return trim(fmt.Sprintf("%.2f", v))
	case below(a, 1000, 0):
		return fmt.Sprintf("%.0f", v)
	case below(a/1e3, 1000, 1):
		return trim(fmt.Sprintf("%.1f", v/1e3)) + "k"
	case below(a/1e6, 1000, 1):
		return trim(fmt.Sprintf("%.1f", v/1e6)) + "M"
	default:
		return trim(fmt.Sprintf("%.1f", v/1e9)) + "G"
	}
}

// below reports whether v, printed with prec decimals, stays below limit:
// 999.6 printed without decimals is 1000, and belongs to the next unit.
func below(v, limit float64, prec int) bool {
	p := math.Pow10(prec)
	return math.Round(v*p)/p < limit
}

// trim drops a trailing ".0"/".00" for compactness.
func trim(s string) string {
	for _, z := range []string{".00", ".0"} {
		if len(s) > len(z) && s[len(s)-len(z):] == z {
			return s[:len(s)-len(z)]
		}
	}
	return s
}

// mbps formats bytes/s as MB/s (10^6).
func mbps(bytesPerSec float64) string {
	mb := bytesPerSec / 1e6
	if mb == 0 {
		return "0"
	}
	return decimals(mb)
}

// us formats ns as microseconds without a unit (for µs columns).
func us(ns float64) string {
	if ns <= 0 {
		return "-"
	}
	return decimals(ns / 1e3)
}

// decimals formats v with 2 decimals below 10, 1 below 1000, else as si.
func decimals(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "-"
	case below(v, 10, 2):
		return fmt.Sprintf("%.2f", v)
	case below(v, 1000, 1):
		return fmt.Sprintf("%.1f", v)
	default:
		return si(v)
	}
}

// dur formats ns with a unit: 850ns, 12.3µs, 4.1ms, 2.0s.
func dur(ns float64) string {
	switch {
	case math.IsNaN(ns) || math.IsInf(ns, 0):
		return "-"
	case ns <= 0:
		return "0"
	case below(ns, 1e3, 0):
		return fmt.Sprintf("%.0fns", ns)
	case below(ns/1e3, 1000, 1):
		return fmt.Sprintf("%.1fµs", ns/1e3)
	case below(ns/1e6, 1000, 1):
		return fmt.Sprintf("%.1fms", ns/1e6)
	default:
		return fmt.Sprintf("%.1fs", ns/1e9)
	}
}

// pct formats a fraction as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", f*100) }

// age formats a duration coarsely: 3s, 4m12s, 2h5m.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}
