package admission

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

const (
	// pollEvery is how often the engine's queue gauges are read while
	// requests are in flight under the automatic cap.
	pollEvery = 250 * time.Millisecond
	// pollRetry is the longest pause after failed reads, so an engine
	// without readable metrics is not asked four times a second. The
	// pauses grow to it from pollFirstRetry (retryAfter): a real
	// llama-server under a burst once let one read time out, and ten
	// seconds without readings let the automatic cap drift far above its
	// slots.
	pollRetry      = 10 * time.Second
	pollFirstRetry = time.Second
	// pollTimeout bounds one read; /metrics answers even when the engine
	// core is hung.
	pollTimeout = 2 * time.Second
)

// WithEngineReader is how the limiter reads the engine's /metrics: the
// same probes.Reader as the watchdog's, so both read the engine by its
// profile (vLLM's, SGLang's, llama.cpp's names, or engine.metrics). The
// default reads vLLM's names; nil disables reading the engine.
func WithEngineReader(r *probes.Reader) Option {
	return func(l *Limiter) { l.reader = r }
}

// readEngineQueue reads the engine's load through the engine reader (the
// watchdog's scrape of /metrics, over the limiter's own connections): the
// queue gauges summed over their label sets (data-parallel engines report
// one per engine), with the series that tell a prefill backlog from a full
// engine.
func (l *Limiter) readEngineQueue(ctx context.Context) (core.EngineLoad, error) {
	ld, err := l.reader.Read(ctx, l.metricsTarget)
	if err != nil {
		return core.EngineLoad{}, fmt.Errorf("admission: read engine metrics: %w", err)
	}
	return core.EngineLoad{Waiting: ld.Waiting, Running: ld.Running, KVUsage: ld.KVUsage,
		PromptTokens: ld.PromptTokens, FirstTokens: ld.FirstTokens, CachedTokens: ld.CachedTokens}, nil
}

// pollEngine feeds the engine's load to the cap while the core wants it
// (core.Limiter.ReadsEngine: requests in flight, an idle engine is left
// alone). It runs until Close. It
// keeps time by the limiter's Clock, like every other interval of the
// limiter, so the poll keeps its proportion to the engine's time.
func (l *Limiter) pollEngine() {
	defer close(l.pollDone)
	tick := make(chan struct{}, 1)
	wait := pollEvery
	failures := 0
	for {
		if !l.sleepOn(wait, tick) {
			return
		}
		wait = pollEvery
		if !l.core.ReadsEngine() {
			continue
		}
		ctx, cancel := context.WithTimeout(l.base, pollTimeout)
		g, err := l.readEngineQueue(ctx)
		cancel()
		if err != nil {
			if l.base.Err() != nil {
				return
			}
			failures++
			wait = retryAfter(failures)
			if failures == 1 {
				l.log.WithError(err).WithField("retry_seconds", wait.Seconds()).
					Warn("admission: cannot read the engine's queue; the automatic cap falls back to TTFT and failures")
			}
			continue
		}
		if failures > 0 {
			l.log.Info("admission: reading the engine's queue again")
			failures = 0
		}
		l.core.ObserveEngine(g)
		l.readSeats()
	}
}

// retryAfter is the pause after the n-th failed read in a row (n >= 1):
// pollFirstRetry, doubling up to pollRetry. One read lost to a busy engine
// costs a second of readings; an engine whose metrics stay unreadable is
// asked every pollRetry.
func retryAfter(n int) time.Duration {
	d := pollFirstRetry
	for i := 1; i < n && d < pollRetry; i++ {
		d *= 2
	}
	return min(d, pollRetry)
}

// sleepOn waits d on the limiter's clock (tick is the caller's, reused
// across waits); false once the limiter is closing.
func (l *Limiter) sleepOn(d time.Duration, tick chan struct{}) bool {
	stop := l.clock.AfterFunc(d, func() {
		select {
		case tick <- struct{}{}:
		default:
		}
	})
	select {
	case <-l.base.Done():
		stop()
		return false
	case <-tick:
		return true
	}
}

// engineMetrics is the engine as the reader scrapes it: the upstream's
// base URL (its query dropped), over the limiter's transport, with the
// engine's key when the limiter injects it.
func engineMetrics(upstream *url.URL, tr http.RoundTripper, injectKey bool, key configs.Secret) probes.Target {
	u := *upstream
	u.RawQuery, u.Fragment = "", ""
	t := probes.Target{URL: u.String(), HTTP: &http.Client{Transport: tr}}
	if injectKey {
		t.APIKey = key
	}
	return t
}
