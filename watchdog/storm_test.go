package watchdog

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// extras builds a history where each tick adds the given deltas to the
// extra metrics.
func extras(ticks int, d map[string]float64, reset int) []Sample {
	s := newSim()
	for _, n := range []string{probes.MetricPromptTokens, probes.MetricPrefixCacheQueries, probes.MetricE2ELatencySum, probes.MetricE2ELatencyCount} {
		s.m.Extra[n] = 1000
	}
	for i := range ticks {
		s.tick(1, func(s *sim) {
			for n, v := range d {
				s.m.Extra[n] += v
			}
			if i == reset {
				for n := range s.m.Extra {
					s.m.Extra[n] = 0
				}
			}
		})
	}
	return s.samples
}

func TestRetryStormAlarm(t *testing.T) {
	t.Parallel()
	cfg := configs.RetryStorm{Enabled: true, Window: 5 * time.Minute, Ratio: 0.5, MinQueries: 100_000}
	cases := []struct {
		name          string
		prompt, query float64
		reset         int
		judged, alarm bool
	}{
		{name: "prefills keeping up with admissions is no storm", prompt: 50_000, query: 52_000, reset: -1, judged: true},
		{name: "prompt tokens far behind prefix-cache queries is a retry storm", prompt: 10_000, query: 60_000, reset: -1, judged: true, alarm: true},
		{name: "too little traffic is not judged", prompt: 10, query: 600, reset: -1},
		{name: "a counter reset starts the window again", prompt: 10_000, query: 60_000, reset: 19, judged: false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := extras(21, map[string]float64{probes.MetricPromptTokens: c.prompt, probes.MetricPrefixCacheQueries: c.query}, c.reset)
			got := CheckRetryStorm(h, cfg)
			if got.Judged != c.judged || got.Alarm != c.alarm {
				t.Fatalf("%+v", got)
			}
			if c.judged && got.Window != 5*time.Minute {
				t.Fatalf("window %s, want the configured 5m", got.Window)
			}
		})
	}
}

func TestInFlightIsLittlesLaw(t *testing.T) {
	t.Parallel()
	// 2 completions a second (30 per 15 s) of 12 s each: 24 in flight.
	h := extras(4, map[string]float64{probes.MetricE2ELatencyCount: 30, probes.MetricE2ELatencySum: 30 * 12}, -1)
	got, ok := InFlight(h, time.Minute)
	if !ok || got != 24 {
		t.Fatalf("in flight %v (%v), want 24", got, ok)
	}
	if _, ok := InFlight(extras(4, nil, -1), time.Minute); ok {
		t.Fatal("in flight known without completions")
	}
}
