package alerts

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/watchdog"
)

// flakyEngine is a healthy, lightly loaded engine behind a /metrics that
// is damaged every other scrape, the way a proxy damages it: a 500, or a
// body cut at a line boundary that parses with a heartbeat family
// missing.
type flakyEngine struct {
	mu      sync.Mutex
	start   time.Time
	scrapes int
	damage  string // "500" or "cut"
	probe   probes.CompletionStatus
}

func (f *flakyEngine) Models(context.Context) probes.ModelsObservation {
	return probes.ModelsObservation{Observation: probes.Observation{Endpoint: probes.EndpointModels, Code: 200, Latency: 2 * time.Millisecond}, Models: []string{"llama"}}
}

func (f *flakyEngine) Health(context.Context) probes.Observation {
	return probes.Observation{Endpoint: probes.EndpointHealth, Code: 200, Latency: time.Millisecond}
}

func (f *flakyEngine) Metrics(context.Context) probes.MetricsObservation {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scrapes++
	if f.scrapes%2 == 0 && f.damage == "500" {
		return probes.MetricsObservation{Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Code: 500, Class: probes.ClassHTTPStatus, Latency: time.Millisecond}}
	}
	secs := time.Since(f.start).Seconds()
	m := probes.MetricsObservation{
		Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Code: 200, Latency: 3 * time.Millisecond},
		Metrics: &probes.Metrics{
			Waiting: 0, Running: 2,
			Progress:   map[string]float64{"vllm:generation_tokens_total": 1000 + 500*secs, "vllm:prompt_tokens_total": 2000 + 800*secs},
			Heartbeats: map[string]float64{"vllm:iteration_tokens_total_count": 10 + 20*secs},
			Extra:      map[string]float64{probes.MetricRequestSuccess: secs},
		},
	}
	if f.scrapes%2 == 0 && f.damage == "cut" {
		delete(m.Metrics.Heartbeats, "vllm:iteration_tokens_total_count")
		m.Missing = []string{"vllm:iteration_tokens_total_count"}
	}
	return m
}

func (f *flakyEngine) StartCompletion(model string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probe = probes.CompletionStatus{State: probes.ProbeOK, Model: model, Started: time.Now(),
		Observation: probes.Observation{Endpoint: probes.EndpointCompletions, Code: 200, Latency: 40 * time.Millisecond}}
	return true
}

func (f *flakyEngine) PollCompletion() probes.CompletionStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probe
}

// A flaky /metrics on a healthy engine paged 16 "ODD: /metrics answers
// 500", and a body cut every other scrape 15 "metrics missing… check
// engine.metrics" in 90 s. Through the real watchdog and pager, neither
// pages at all: no scrape's damage lasts.
func TestAFlakyMetricsOnAHealthyEnginePagesNothing(t *testing.T) {
	for _, damage := range []string{"500", "cut"} {
		t.Run("every other scrape "+damage, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := demoConfig()
				cfg.Watchdog.Interval = 5 * time.Second
				n := &memNotifier{}
				o := OptionsFromConfig(cfg)
				p := newTestPager(t, n, o)
				w, err := watchdog.New(watchdog.Options{
					Engine: cfg.Engine, Watchdog: cfg.Watchdog, UnknownAfter: cfg.Alerts.UnknownAfter, CalmFor: cfg.Alerts.ResolveAfter,
					Node: cfg.Node, Probes: &flakyEngine{start: time.Now(), damage: damage}, Pager: p, Conditions: p,
					Notice: func(kind, text string) { p.Notice(kind, text) },
				})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for range 26 { // 130 s
					w.Cycle(ctx)
					time.Sleep(cfg.Watchdog.Interval)
				}
				runCtx, stop := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- p.Run(runCtx) }()
				flush(t, p)
				stop()
				<-done
				var all []string
				for _, m := range n.got() {
					all = append(all, m.Text)
				}
				if len(all) > 0 {
					t.Errorf("%d pages about a healthy engine with a flaky /metrics:\n%s", len(all), strings.Join(all, "\n"))
				}
			})
		})
	}
}

var _ watchdog.Probes = (*flakyEngine)(nil)
