package routing

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of AffinityOptions.
const (
	DefaultAffinityWindow     = 10 * time.Minute
	DefaultAffinityMinRetries = 20
	DefaultAffinityLow        = 0.5
)

// AffinityOptions tunes the routing judgement.
type AffinityOptions struct {
	// Window is how far back the share is measured.
	Window time.Duration
	// MinRetries is the fewest keyed retries in the window the share is
	// judged on: a handful of retries says nothing about routing.
	MinRetries uint64
	// Low is the share under which routing is judged not key-affine. With
	// N members and round-robin about 1/N of retries find their
	// execution; with key-affine routing nearly all do (those whose result
	// expired or failed do not).
	Low float64
}

// AffinityReport is the share of keyed retries that found their call's
// execution on this node, over the window: /status's "routing" section.
type AffinityReport struct {
	WindowSeconds float64 `json:"window_seconds"`
	// Retries are keyed retries that had an execution to find; Found
	// those that found it (attached or stored).
	Retries uint64 `json:"keyed_retries"`
	Found   uint64 `json:"found"`
	// Share is Found/Retries; absent with no retries in the window.
	Share *float64 `json:"share,omitempty"`
	// Low: the share is under the threshold on enough retries, and has not
	// come back well above it since: routing is not key-affine.
	Low bool `json:"low"`
}

// String is the line diagnose prints.
func (r AffinityReport) String() string {
	w := time.Duration(r.WindowSeconds * float64(time.Second)).Round(time.Second)
	if r.Share == nil {
		return fmt.Sprintf("routing: no keyed retries in the last %s", w)
	}
	s := fmt.Sprintf("routing: %.0f%% of keyed retries found their execution here (%d of %d over %s)",
		100**r.Share, r.Found, r.Retries, w)
	if r.Low {
		s += ": NOT KEY-AFFINE, the load balancer sends retries to members that never ran their call"
	}
	return s
}

type affinitySample struct {
	at             time.Time
	retries, found uint64
}

// Affinity judges from the limiter's cumulative keyed-retry counters
// whether the load balancer routes keyed calls by their key. Observe is
// called every watchdog interval; it is safe for concurrent use.
type Affinity struct {
	opts AffinityOptions

	mu      sync.Mutex
	samples []affinitySample // oldest first; samples[0] is the window's baseline
	last    AffinityReport
}

// NewAffinity returns a judge with o's zero fields at their defaults.
func NewAffinity(o AffinityOptions) *Affinity {
	if o.Window <= 0 {
		o.Window = DefaultAffinityWindow
	}
	if o.MinRetries == 0 {
		o.MinRetries = DefaultAffinityMinRetries
	}
	if o.Low <= 0 {
		o.Low = DefaultAffinityLow
	}
	return &Affinity{opts: o, last: AffinityReport{WindowSeconds: o.Window.Seconds()}}
}

// Observe records the counters as of now and returns the report and, on a
// change of judgement only, the text of the one page to send: when the
// share falls under Low on at least MinRetries retries, and when it is
// back well above (Low plus a margin, so a share hovering at the
// threshold pages once, not at every crossing). Counters that went down
// (a fresh limiter) restart the window.
func (a *Affinity) Observe(now time.Time, retries, found uint64) (AffinityReport, string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.samples); n > 0 && (retries < a.samples[n-1].retries || found < a.samples[n-1].found) {
		a.samples = a.samples[:0]
	}
	a.samples = append(a.samples, affinitySample{at: now, retries: retries, found: found})
	// Keep the newest sample at or before the window's start as the
	// baseline; drop the ones before it.
	cut := 0
	for i := 1; i < len(a.samples) && !a.samples[i].at.After(now.Add(-a.opts.Window)); i++ {
		cut = i
	}
	a.samples = a.samples[cut:]
	base := a.samples[0]

	rep := AffinityReport{WindowSeconds: a.opts.Window.Seconds(), Retries: retries - base.retries, Found: found - base.found, Low: a.last.Low}
	if rep.Retries > 0 {
		share := float64(rep.Found) / float64(rep.Retries)
		rep.Share = &share
	}
	page := ""
	if rep.Retries >= a.opts.MinRetries {
		share := *rep.Share
		switch {
		case !rep.Low && share < a.opts.Low:
			rep.Low = true
			page = fmt.Sprintf("ROUTING NOT KEY-AFFINE: only %.0f%% of keyed retries found their call's execution on this node "+
				"(%d of %d over %s); the load balancer sends retries to members that never ran their call, where each starts "+
				"new work. Route by the Idempotency-Key header on a consistent hash (HAProxy: configs/haproxy/pool.cfg, "+
				"balance hdr(Idempotency-Key) with hash-type consistent).",
				100*share, rep.Found, rep.Retries, a.opts.Window)
		case rep.Low && share >= math.Min(1, a.opts.Low+0.2):
			rep.Low = false
			page = fmt.Sprintf("routing key-affine again: %.0f%% of keyed retries found their execution (%d of %d over %s)",
				100*share, rep.Found, rep.Retries, a.opts.Window)
		}
	}
	a.last = rep
	return rep, page
}

// Report is the last report (a zero share before any Observe).
func (a *Affinity) Report() AffinityReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// Collectors are the report as metrics: vigil_pool_keyed_retry_found_share
// (NaN with no retries in the window), vigil_pool_keyed_retries_window and
// vigil_pool_routing_not_affine.
func (a *Affinity) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vigil_pool_keyed_retry_found_share",
			Help: "Share of keyed retries that found their call's execution on this node over the routing window (NaN: none)."},
			func() float64 {
				if r := a.Report(); r.Share != nil {
					return *r.Share
				}
				return math.NaN()
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vigil_pool_keyed_retries_window",
			Help: "Keyed retries with an execution to find over the routing window."},
			func() float64 { return float64(a.Report().Retries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vigil_pool_routing_not_affine",
			Help: "1 while the found share is low on enough retries: the load balancer does not route by key."},
			func() float64 {
				if a.Report().Low {
					return 1
				}
				return 0
			}),
	}
}
