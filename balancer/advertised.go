package balancer

import (
	"fmt"
	"sync"
	"time"
)

// advertised is what a polled balancer (a health check, an agent check)
// is told about this host: in rotation at a weight, or out since a time.
// Drain, Ready and SetWeight only change it; the balancer learns it at
// its next poll.
type advertised struct {
	now func() time.Time

	mu      sync.Mutex
	out     bool
	since   time.Time // of the last change of out
	weight  int       // percent of the configured weight while in rotation
	version uint64    // counts the changes, so a poll can be matched to one
	changed chan struct{}
}

// advert is one reading of advertised.
type advert struct {
	Out     bool
	Since   time.Time
	Weight  int
	Version uint64
}

func newAdvertised(now func() time.Time) *advertised {
	if now == nil {
		now = time.Now
	}
	return &advertised{now: now, weight: 100, since: now(), changed: make(chan struct{})}
}

// set applies a change and wakes whoever waits on one.
func (a *advertised) set(f func()) uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	wasOut := a.out
	f()
	if a.out != wasOut {
		a.since = a.now()
	}
	a.version++
	close(a.changed)
	a.changed = make(chan struct{})
	return a.version
}

func (a *advertised) drain() uint64 { return a.set(func() { a.out = true }) }

func (a *advertised) ready() uint64 { return a.set(func() { a.out = false }) }

func (a *advertised) setWeight(percent int) (uint64, error) {
	if percent < 1 || percent > 100 {
		return 0, fmt.Errorf("weight %d%% is outside 1..100", percent)
	}
	return a.set(func() { a.weight = percent }), nil
}

func (a *advertised) read() advert {
	a.mu.Lock()
	defer a.mu.Unlock()
	return advert{Out: a.out, Since: a.since, Weight: a.weight, Version: a.version}
}

// outWords says why the host is out, for a health check's 503 body.
func (ad advert) outWords(now time.Time) string {
	return fmt.Sprintf("draining: vigil took this host out of rotation at %s (%s ago) to recover the engine; "+
		"it stays out until the engine serves again", ad.Since.UTC().Format(time.RFC3339), now.Sub(ad.Since).Round(time.Second))
}
