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

	"github.com/vigil-dev/vigil/admission/core"
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
// over their label sets (data-parallel engines report one per engine),
// with the series that tell a prefill backlog from a full engine
// (engineload.go).
func (l *Limiter) readEngineQueue(ctx context.Context) (core.EngineLoad, error) {
	u := *l.upstream
	u.Path = strings.TrimSuffix(u.Path, "/") + "/metrics"
	u.RawQuery = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return core.EngineLoad{}, fmt.Errorf("admission: engine metrics request: %w", err)
	}
	if l.cfg.InjectAPIKey && l.engineKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.engineKey.Value())
	}
	resp, err := l.transport.RoundTrip(req)
	if err != nil {
		return core.EngineLoad{}, fmt.Errorf("admission: read engine metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return core.EngineLoad{}, fmt.Errorf("admission: read engine metrics: %s answered %d", u.Path, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxMetricsBytes))
	if err != nil {
		return core.EngineLoad{}, fmt.Errorf("admission: parse engine metrics: %w", err)
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
		return core.EngineLoad{}, fmt.Errorf("admission: engine metrics lack %s", l.gaugeWaiting)
	}
	running, _ := sum(l.gaugeRunning)
	g := core.QueueOnly(waiting, running)
	loadExtras(&g, fams)
	return g, nil
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
		l.core.ObserveEngine(g)
	}
}
