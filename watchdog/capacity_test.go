package watchdog

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

func loadSample(at time.Time, done, latencySum, queueSum float64) Sample {
	return Sample{At: at, Metrics: probes.MetricsObservation{
		Observation: probes.Observation{Endpoint: probes.EndpointMetrics, Code: 200},
		Metrics: &probes.Metrics{Extra: map[string]float64{
			probes.MetricE2ELatencyCount: done, probes.MetricE2ELatencySum: latencySum,
			probes.MetricQueueTimeCount: done, probes.MetricQueueTimeSum: queueSum,
		}},
	}}
}

func TestLittlesLawGivesTheWorkInFlightAndARecommendedCap(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name                 string
		done, latency, queue float64 // over 60 s
		inFlight, executing  float64
		recommended          int
		saturated            bool
	}{
		// 3 completions/s, 30 s each of which 25 s queued: 90 in the
		// engine, 15 executing at once.
		{"a saturated engine queues most of its work: the cap it can use is what it executes", 180, 180 * 30, 180 * 25, 90, 15, 17, true},
		// 2 completions/s, 4 s each, no queue: demand, not capacity.
		{"an engine that never queued shows demand, not capacity", 120, 120 * 4, 0, 8, 8, 9, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := []Sample{loadSample(t0, 1000, 5000, 100), loadSample(t0.Add(60*time.Second), 1000+tc.done, 5000+tc.latency, 100+tc.queue)}
			l, ok := LoadOver(h, 5*time.Minute)
			if !ok {
				t.Fatal("no load")
			}
			if l.InFlight != tc.inFlight || l.Executing != tc.executing || l.RecommendedCap != tc.recommended || l.Saturated != tc.saturated {
				t.Fatalf("load %+v; want in flight %v, executing %v, cap %d, saturated %v", l, tc.inFlight, tc.executing, tc.recommended, tc.saturated)
			}
		})
	}
	if _, ok := LoadOver([]Sample{loadSample(t0, 5, 5, 0), loadSample(t0.Add(time.Minute), 5, 5, 0)}, time.Hour); ok {
		t.Fatal("no completions in the window must not give a load")
	}
}
