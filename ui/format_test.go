package ui

import (
	"math"
	"testing"
)

// TestFormatters pins the cell formatters to hand-written strings: zero,
// small, each unit switch from both sides (and values that round up to
// the next unit), large and negative values, NaN and ±Inf.
func TestFormatters(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(float64) string
		in   float64
		want string
	}{
		// si: 2 decimals below 10 (".00" trimmed), none below 1000, then
		// one decimal of k, M, G (".0" trimmed).
		{"si", si, 0, "0"},
		{"si", si, 0.5, "0.50"},
		{"si", si, 0.004, "0"}, // 0.00 is trimmed to 0
		{"si", si, 3, "3"},     // 3.00
		{"si", si, 9.99, "9.99"},
		{"si", si, 10, "10"},
		{"si", si, 27.5, "28"}, // %.0f rounds half to even
		{"si", si, 999, "999"},
		{"si", si, 9.996, "10"},   // 10.00: the next format
		{"si", si, 999.6, "1k"},   // 1000 without a suffix would be a unit too small
		{"si", si, 999_960, "1M"}, // not 1000k
		{"si", si, 999.96e6, "1G"},
		{"si", si, math.Inf(1), "-"},
		{"si", si, math.Inf(-1), "-"},
		{"si", si, 1000, "1k"}, // 1.0k
		{"si", si, 1500, "1.5k"},
		{"si", si, 12_345, "12.3k"},
		{"si", si, 999_000, "999k"},
		{"si", si, 1e6, "1M"},
		{"si", si, 2_340_000, "2.3M"},
		{"si", si, 1e9, "1G"},
		{"si", si, 2.5e9, "2.5G"},
		{"si", si, 1e12, "1000G"}, // G is the largest unit
		{"si", si, -0.25, "-0.25"},
		{"si", si, -5, "-5"},
		{"si", si, -1500, "-1.5k"},
		{"si", si, -3e6, "-3M"},

		// mbps: bytes/s over 10^6; 2 decimals below 10 MB/s, 1 below 1000,
		// then si.
		{"mbps", mbps, 0, "0"},
		{"mbps", mbps, 1, "0.00"},
		{"mbps", mbps, 440, "0.00"},
		{"mbps", mbps, 1_500_000, "1.50"},
		{"mbps", mbps, 9_990_000, "9.99"},
		{"mbps", mbps, 10_000_000, "10.0"},
		{"mbps", mbps, 123_400_000, "123.4"},
		{"mbps", mbps, 999_000_000, "999.0"},
		{"mbps", mbps, 1e9, "1k"},
		{"mbps", mbps, 2.5e9, "2.5k"},
		{"mbps", mbps, 3e12, "3M"},
		{"mbps", mbps, -1_500_000, "-1.50"},
		{"mbps", mbps, 9_996_000, "10.0"}, // not 10.00
		{"mbps", mbps, 999_960_000, "1k"}, // not 1000.0

		// us: ns as µs without a unit; "-" for none.
		{"us", us, 0, "-"},
		{"us", us, -5, "-"},
		{"us", us, 1, "0.00"},
		{"us", us, 400, "0.40"},
		{"us", us, 9_990, "9.99"},
		{"us", us, 10_000, "10.0"},
		{"us", us, 123_450, "123.5"}, // 123.45 is just above in binary
		{"us", us, 999_900, "999.9"},
		{"us", us, 1e6, "1k"},
		{"us", us, 2.5e6, "2.5k"},

		// dur: ns with a unit.
		{"dur", dur, 0, "0"},
		{"dur", dur, -1, "0"},
		{"dur", dur, 1, "1ns"},
		{"dur", dur, 850, "850ns"},
		{"dur", dur, 999, "999ns"},
		{"dur", dur, 1_000, "1.0µs"},
		{"dur", dur, 12_340, "12.3µs"},
		{"dur", dur, 999_000, "999.0µs"},
		{"dur", dur, 1e6, "1.0ms"},
		{"dur", dur, 4_100_000, "4.1ms"},
		{"dur", dur, 999e6, "999.0ms"},
		{"dur", dur, 1e9, "1.0s"},
		{"dur", dur, 2e9, "2.0s"},
		{"dur", dur, 3.6e12, "3600.0s"}, // s is the largest unit
		{"dur", dur, 999.6, "1.0µs"},    // not 1000ns
		{"dur", dur, 999_960, "1.0ms"},  // not 1000.0µs
		{"dur", dur, 999_960_000, "1.0s"},
	} {
		if got := c.f(c.in); got != c.want {
			t.Errorf("%s(%v) = %q, want %q", c.name, c.in, got, c.want)
		}
	}
}

// TestFormattersNaN: a NaN or ±Inf (a rate over no time, say) shows as
// "-", never as "NaNG", "NaNs" or "-Inf".
func TestFormattersNaN(t *testing.T) {
	for name, f := range map[string]func(float64) string{"si": si, "mbps": mbps, "us": us, "dur": dur} {
		for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			if got := f(v); got != "-" {
				t.Errorf("%s(%v) = %q, want \"-\"", name, v, got)
			}
		}
	}
}
