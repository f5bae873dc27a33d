package admission

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/sirupsen/logrus"
)

const (
	// pollEvery is how often the engine's queue gauges are read while
	// requests are in flight under the automatic cap.
	pollEvery = 250 * time.Millisecond
	// pollRetry is the pause after a failed read, so an engine without
	// readable metrics is not asked four times a second.
	pollRetry = 10 * time.Second
	// pollTimeout bounds one read; /metrics answers even when the engine
	// core is hung.
	pollTimeout = 2 * time.Second
	// maxMetricsBytes bounds what is read of one scrape.
	maxMetricsBytes = 8 << 20
)

// WithEngineMetrics names the engine's waiting and running gauges (vLLM's
// vllm:num_requests_waiting and vllm:num_requests_running by default), as
// configured under engine.metrics. Empty waiting disables reading them.
func WithEngineMetrics(waiting, running string) Option {
	return func(l *Limiter) { l.gaugeWaiting, l.gaugeRunning = waiting, running }
}

// readEngineQueue scrapes the engine's /metrics and sums the two gauges
// over their label sets (data-parallel engines report one per engine).
func (l *Limiter) readEngineQueue(ctx context.Context) (g engineLoad, err error) {
	u := *l.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + "/metrics"
	u.RawQuery = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return g, fmt.Errorf("admission: engine metrics request: %w", err)
	}
	if l.cfg.InjectAPIKey && l.engineKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.engineKey.Value())
	}
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return g, fmt.Errorf("admission: read engine metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return g, fmt.Errorf("admission: read engine metrics: %s answered %d", u.Path, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return g, fmt.Errorf("admission: parse engine metrics: %w", err)
	}
	sum := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok || name == "" {
			return 0, false
		}
		v := 0.0
		for _, m := range f.GetMetric() {
			if g := m.GetGauge(); g != nil {
				v += g.GetValue()
			} else if u := m.GetUntyped(); u != nil {
				v += u.GetValue()
			}
		}
		return v, true
	}
	waiting, ok := sum(l.gaugeWaiting)
	if !ok {
		return g, fmt.Errorf("admission: engine metrics lack %s", l.gaugeWaiting)
	}
	running, _ := sum(l.gaugeRunning)
	g = queueOnly(waiting, running)
	loadExtras(&g, fams)
	return g, nil
}

// pollEngine feeds the engine's queue to the automatic cap while requests
// are in flight (an idle engine is left alone). It runs until Close. It
// keeps time by the limiter's Clock, like every other interval of the
// limiter, so the poll keeps its proportion to the engine's time.
func (l *Limiter) pollEngine() {
	defer close(l.pollDone)
	tick := make(chan struct{}, 1)
	wait := pollEvery
	failing := false
	for {
		stop := l.clock.AfterFunc(wait, func() {
			select {
			case tick <- struct{}{}:
			default:
			}
		})
		select {
		case <-l.base.Done():
			stop()
			return
		case <-tick:
		}
		wait = pollEvery
		l.mu.Lock()
		// A fixed cap reads them only while the watchdog says saturated,
		// to tell a prefill backlog from a full engine (capLocked).
		busy := (l.fixed == 0 || l.saturated) && l.inFlight > 0
		l.mu.Unlock()
		if !busy {
			continue
		}
		ctx, cancel := context.WithTimeout(l.base, pollTimeout)
		g, err := l.readEngineQueue(ctx)
		cancel()
		if err != nil {
			if l.base.Err() != nil {
				return
			}
			if !failing {
				l.log.WithError(err).WithField("retry_seconds", pollRetry.Seconds()).
					Warn("admission: cannot read the engine's queue; the automatic cap falls back to TTFT and failures")
			}
			failing = true
			wait = pollRetry
			continue
		}
		if failing {
			l.log.Info("admission: reading the engine's queue again")
			failing = false
		}
		l.mu.Lock()
		l.engineWaiting, l.engineRunning = g.waiting, g.running
		if l.fixed > 0 {
			now := l.clock.Now()
			l.auto.notePrefill(g, now)
			l.dispatchLocked(now)
		} else if now := l.clock.Now(); l.auto.observeEngineLoad(g, now) {
			l.log.WithFields(logrus.Fields{"cap": l.auto.cap(), "engine_waiting": g.waiting, "engine_running": g.running}).
				Debug("admission: automatic cap changed")
			l.dispatchLocked(now)
		}
		l.mu.Unlock()
	}
}
