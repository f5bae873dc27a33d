package harness

import (
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile (0-100) of xs; 0 for none.
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Share is n/of as a fraction, 0 when of is 0.
func Share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}
