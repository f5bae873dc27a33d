package enginesim

import "time"

// Workload is a stream of identical requests sharing one prefix.
type Workload struct {
	PromptTokens int // whole prompt, shared prefix included
	PrefixTokens int // shared prefix (same prefix id for every request)
	OutputTokens int // answer length
}

// MeasureCapacity returns the steady-state throughput, in completed calls
// per engine second, of an engine with cfg under an endless backlog of w. It
// drives the scheduler offline (no sleeping, no HTTP), so it is exact and
// fast; it is how the default cost model was calibrated. The figure is in
// engine time, like every figure the engine reports: multiply by Scale for
// wall-clock calls/s. It measures one rank: with DataParallel N the engine
// serves N times as much (each rank has its own seats, budget and KV cache).
func MeasureCapacity(cfg Config, w Workload) float64 {
	s := newSched(cfg, newMetrics(cfg))
	var now time.Duration
	var id int
	feed := func() {
		for len(s.waiting) < 16 {
			id++
			r := newRequest("", w.PromptTokens, w.PrefixTokens, "shared", w.OutputTokens, reasonStop)
			r.arrival = now
			s.add(r)
		}
	}
	// Warm up until the batch has turned over twice, then measure.
	warm := uint64(2 * cfg.MaxNumSeqs)
	var t0 time.Duration
	var c0 uint64
	for {
		feed()
		b := s.schedule(now)
		now += s.cost(b)
		s.complete(b, now)
		if c0 == 0 && s.c.completed >= warm {
			t0, c0 = now, s.c.completed
		}
		if c0 > 0 && s.c.completed-c0 >= 4*warm {
			return float64(s.c.completed-c0) / (now - t0).Seconds()
		}
	}
}

// MeasureTTFT returns the time to first token, in engine time, of one call
// of w on an idle engine with cfg whose prefix cache already holds w's
// shared prefix: the least TTFT the engine can give such a call, the
// prefill's own cost. Like MeasureCapacity it drives the scheduler
// offline, so it is exact.
func MeasureTTFT(cfg Config, w Workload) time.Duration {
	s := newSched(cfg, newMetrics(cfg))
	var now time.Duration
	if w.PrefixTokens > 0 {
		s.prefix.touch("shared", true)
	}
	r := newRequest("", w.PromptTokens, w.PrefixTokens, "shared", max(2, w.OutputTokens), reasonStop)
	s.add(r)
	for r.generated == 0 {
		b := s.schedule(now)
		now += s.cost(b)
		s.complete(b, now)
	}
	return now
}
