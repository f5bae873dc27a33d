package watchdog

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/util/humanize"
)

// LimiterSource reads the counts of a limiter that runs in another
// process in front of the engine: for `vigil diagnose`, the local vigil's
// /status. Without them diagnose cannot tell an API server starved under
// load, whose engine streams the calls vigil proxies, from a wedged one.
type LimiterSource interface {
	ReadLimiter(ctx context.Context) (LimiterLoad, error)
	// String says where the counts come from, for the report.
	String() string
}

// LimiterSeen is what Diagnose read of the limiter's counts across its
// window.
type LimiterSeen struct {
	// From is where (LimiterSource.String); Read how many of the Samples
	// carried the counts.
	From    string `json:"from"`
	Read    int    `json:"read"`
	Samples int    `json:"samples"`
	// Answered and EngineReads are the calls the engine answered through
	// the limiter and the reads of its answers (any byte), summed from one
	// reading to the next over Over, the first reading to the last. A
	// count lower than the reading before (the vigil restarted) adds
	// nothing.
	Answered    uint64        `json:"answered"`
	EngineReads uint64        `json:"engine_reads"`
	Over        time.Duration `json:"-"`
	// Quiet is how long before the last reading the engine's answers last
	// moved through the limiter (Over when they never did).
	Quiet time.Duration `json:"-"`
	// Error is the last failed read, if any.
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes durations as seconds.
func (l LimiterSeen) MarshalJSON() ([]byte, error) {
	type plain LimiterSeen
	return json.Marshal(struct {
		plain
		Over  float64 `json:"over_seconds"`
		Quiet float64 `json:"quiet_seconds"`
	}{plain(l), l.Over.Seconds(), l.Quiet.Seconds()})
}

// sampler takes Diagnose's samples: the engine's, with the limiter's
// counts read on both sides of each when a source is given, as the
// daemon's cycle does.
type sampler struct {
	p       Probes
	src     LimiterSource
	timeout time.Duration

	mu     sync.Mutex
	failed string
}

func (sm *sampler) take(ctx context.Context, at time.Time) Sample {
	if sm.src == nil {
		return sampleOnce(ctx, sm.p, at, sm.timeout)
	}
	before, okBefore := sm.read(ctx)
	s := sampleOnce(ctx, sm.p, at, sm.timeout)
	after, okAfter := sm.read(ctx)
	switch {
	case okBefore && okAfter:
		l := bracket(before, after)
		s.Limiter = &l
	case okAfter:
		s.Limiter = &after
	case okBefore:
		s.Limiter = &before
	}
	return s
}

// read reads the limiter's counts within the sample's timeout.
func (sm *sampler) read(ctx context.Context) (LimiterLoad, bool) {
	if sm.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sm.timeout)
		defer cancel()
	}
	l, err := sm.src.ReadLimiter(ctx)
	if err != nil {
		sm.mu.Lock()
		sm.failed = err.Error()
		sm.mu.Unlock()
		return LimiterLoad{}, false
	}
	return l, true
}

func (sm *sampler) lastFailure() string {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.failed
}

// seenThrough sums the limiter's counts across the samples that carried
// them.
func seenThrough(history []Sample, from, failed string) *LimiterSeen {
	ls := &LimiterSeen{From: from, Samples: len(history), Error: failed}
	var first, prev *Sample
	var moved time.Time
	for i := range history {
		s := &history[i]
		if s.Limiter == nil {
			continue
		}
		ls.Read++
		if first == nil {
			first = s
		}
		if prev != nil {
			a, b := prev.Limiter, s.Limiter
			if b.EngineReads >= a.EngineReads && b.Answered >= a.Answered {
				ls.EngineReads += b.EngineReads - a.EngineReads
				ls.Answered += b.Answered - a.Answered
				if b.EngineReads > a.EngineReads {
					moved = s.At
				}
			}
		}
		prev = s
	}
	if first == nil {
		return ls
	}
	ls.Over = prev.At.Sub(first.At)
	ls.Quiet = ls.Over
	if !moved.IsZero() {
		ls.Quiet = prev.At.Sub(moved)
	}
	return ls
}

// writeLimiter is the limiter's side of the window, under Engine: what
// the engine answered through vigil while its endpoints answered what
// the rows above say.
func (r Report) writeLimiter(t *textReport) {
	l := r.Limiter
	if l == nil {
		return
	}
	if l.Read < 2 {
		why := ""
		if l.Error != "" {
			why = "; last failure: " + l.Error
		}
		t.row("through vigil", "not counted: %s gave the limiter's counts at %d of %d samples%s", l.From, l.Read, l.Samples, why)
		return
	}
	last := "no byte"
	if l.EngineReads > 0 {
		last = "last byte " + humanize.Duration(l.Quiet) + " before the last reading"
	}
	t.row("through vigil", "%s calls answered, %s reads of the engine's answers over %s (%s); %s, counts at %d of %d samples",
		humanize.Count(float64(l.Answered)), humanize.Count(float64(l.EngineReads)), humanize.Duration(l.Over), last,
		l.From, l.Read, l.Samples)
	if l.Error != "" {
		t.row("", "last failed read: %s", l.Error)
	}
}
