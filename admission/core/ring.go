package core

import (
	"slices"
	"time"
)

// durationRing keeps the last durations added, as many as it was made
// for: a route's give-ups (giveUps), the last plain answers' times
// (Limiter.answers).
type durationRing struct {
	d    []time.Duration
	n    int
	next int
	// sorted is d[:n] in order, kept until the next add: the queue's
	// order reads the answers' p95 once per waiter on every dispatch,
	// and answers come far less often than that.
	sorted []time.Duration
}

func newDurationRing(size int) durationRing { return durationRing{d: make([]time.Duration, size)} }

func (r *durationRing) add(x time.Duration) {
	r.d[r.next] = x
	r.next = (r.next + 1) % len(r.d)
	r.n = min(r.n+1, len(r.d))
	r.sorted = r.sorted[:0]
}

// quantile is the kept durations' num/den quantile (nearest rank above:
// 1/2 is the median, 95/100 the 95th percentile); 0 when none is kept.
func (r *durationRing) quantile(num, den int) time.Duration {
	if r.n == 0 {
		return 0
	}
	if len(r.sorted) != r.n {
		r.sorted = append(r.sorted[:0], r.d[:r.n]...)
		slices.Sort(r.sorted)
	}
	return r.sorted[min(r.n-1, r.n*num/den)]
}

// ordered is the kept durations, oldest first.
func (r *durationRing) ordered() []time.Duration {
	out := make([]time.Duration, 0, r.n)
	for i := range r.n {
		out = append(out, r.d[(r.next-r.n+i+len(r.d))%len(r.d)])
	}
	return out
}
