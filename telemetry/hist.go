package telemetry

import (
	"math"
	"math/bits"
)

// NumBuckets is the number of latency histogram buckets. Bucket 0 holds
// the value 0; bucket i (1 <= i < NumBuckets-1) holds values in
// [2^(i-1), 2^i) ns; the last bucket holds everything from 2^(NumBuckets-2)
// ns (about 275 s) up.
const NumBuckets = 40

// Histogram counts values (ns) in log2-spaced buckets; see NumBuckets.
type Histogram [NumBuckets]uint64

// BucketIndex returns the bucket that holds v (ns). Negative values go to
// bucket 0.
func BucketIndex(v int64) int {
	if v <= 0 {
		return 0
	}
	b := bits.Len64(uint64(v))
	if b >= NumBuckets {
		return NumBuckets - 1
	}
	return b
}

// BucketBounds returns the half-open range [lo, hi) of bucket i in ns. The
// last bucket's hi is math.MaxInt64. Out-of-range i gives (0, 0).
func BucketBounds(i int) (lo, hi int64) { return logBounds(i, NumBuckets, 1) }

// logBounds is the range [lo, hi) of bucket i of n log-spaced buckets,
// each step powers of two wide: bucket 0 holds 0, bucket i holds
// [2^(step·(i-1)), 2^(step·i)), the last one everything above up to
// math.MaxInt64. Out-of-range i gives (0, 0).
func logBounds(i, n, step int) (lo, hi int64) {
	switch {
	case i < 0 || i >= n:
		return 0, 0
	case i == 0:
		return 0, 1
	case i == n-1:
		return 1 << (step * (i - 1)), math.MaxInt64
	default:
		return 1 << (step * (i - 1)), 1 << (step * i)
	}
}

// Count is the number of values in h.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add returns h + o.
func (h Histogram) Add(o Histogram) Histogram {
	for i := range h {
		h[i] += o[i]
	}
	return h
}

// Sub returns h - o (bucket counts wrap if o is not an earlier copy of h).
func (h Histogram) Sub(o Histogram) Histogram {
	for i := range h {
		h[i] -= o[i]
	}
	return h
}

// Quantile is h.Quantile(q).
func Quantile(h Histogram, q float64) float64 { return h.Quantile(q) }

// Quantile estimates the q-quantile (0 <= q <= 1, clamped) in ns by
// linear interpolation inside the bucket that holds it. An empty
// histogram gives 0. Values in the last (open) bucket are reported as its
// lower bound.
func (h Histogram) Quantile(q float64) float64 { return quantile(h[:], BucketBounds, q) }

// quantile is Quantile over any bucket counts with the given bounds.
func quantile(h []uint64, bounds func(int) (int64, int64), q float64) float64 {
	if q != q || q < 0 { // NaN or negative
		q = 0
	}
	if q > 1 {
		q = 1
	}
	var total uint64
	for _, c := range h {
		total += c
	}
	if total == 0 {
		return 0
	}
	last := len(h) - 1
	target := q * float64(total)
	var cum float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		next := cum + float64(c)
		if next >= target {
			lo, hi := bounds(i)
			if i == 0 {
				return 0
			}
			if i == last {
				return float64(lo)
			}
			f := (target - cum) / float64(c)
			return float64(lo) + f*float64(hi-lo)
		}
		cum = next
	}
	lo, _ := bounds(last)
	return float64(lo)
}

// Mean estimates the mean in ns from bucket midpoints (0 when empty).
func (h Histogram) Mean() float64 {
	var n, sum float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		lo, hi := BucketBounds(i)
		mid := float64(lo)
		if i > 0 && i < NumBuckets-1 {
			mid = (float64(lo) + float64(hi)) / 2
		}
		n += float64(c)
		sum += float64(c) * mid
	}
	if n == 0 {
		return 0
	}
	return sum / n
}
