package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy bounds the delays: the first retry waits about Min, each later
// one doubles, up to Max.
type Policy struct {
	Min, Max time.Duration
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Tests fix it.
	Rand func() float64
}

// Delay is the wait before retry number attempt (1 for the first retry).
// It is drawn uniformly from the upper half of the exponential step
// ("equal jitter"): never below half the step, so a retry is never
// instant, and spread over the other half, so a fleet drifts apart.
func (p Policy) Delay(attempt int) time.Duration {
	step := p.Ceiling(attempt)
	r := p.Rand
	if r == nil {
		r = rand.Float64
	}
	half := step / 2
	return half + time.Duration(r()*float64(step-half))
}

// Ceiling is the exponential step for attempt without jitter: Min
// doubled attempt-1 times, at most Max.
func (p Policy) Ceiling(attempt int) time.Duration {
	d := p.Min
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	if p.Max > 0 {
		d = min(d, p.Max)
	}
	return d
}
