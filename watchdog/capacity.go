package watchdog

import (
	"encoding/json"
	"math"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// Load is Little's law over a window, from the engine's own counters and
// histograms: how much work the engine genuinely holds, and how much of it
// it executes at once. It is what `diagnose` and /status print beside the
// limiter's cap.
type Load struct {
	Window            time.Duration `json:"-"`
	CompletionsPerSec float64       `json:"completions_per_second"`
	// MeanLatency is end to end; MeanQueue the part spent waiting in the
	// engine's own queue.
	MeanLatency time.Duration `json:"-"`
	MeanQueue   time.Duration `json:"-"`
	// InFlight = completions/s x mean latency: queued plus executing.
	InFlight float64 `json:"in_flight"`
	// Executing = completions/s x (mean latency - mean queue time): the
	// work the engine ran at once at the throughput it reached.
	Executing float64 `json:"executing"`
	// RecommendedCap is Executing with 10% headroom: under load, admitting
	// more than the engine executes at once only queues it inside the
	// engine, where nobody can shed it. It reads demand, not capacity, when
	// the engine never queued in the window (Saturated false).
	RecommendedCap int `json:"recommended_cap"`
	// Saturated: the engine's queue time was a noticeable part of the
	// latency (over 5%), so Executing measured capacity, not demand.
	Saturated bool `json:"measured_under_load"`
}

// MarshalJSON writes durations in seconds.
func (l Load) MarshalJSON() ([]byte, error) {
	type plain Load
	return json.Marshal(struct {
		plain
		Window      float64 `json:"window_seconds"`
		MeanLatency float64 `json:"mean_latency_seconds"`
		MeanQueue   float64 `json:"mean_queue_seconds"`
	}{plain(l), l.Window.Seconds(), l.MeanLatency.Seconds(), l.MeanQueue.Seconds()})
}

// LoadOver applies Little's law over the readable samples within window
// before the last one. ok is false without completions in the window.
func LoadOver(history []Sample, window time.Duration) (l Load, ok bool) {
	first, last := extraSpan(history, window, probes.MetricE2ELatencySum, probes.MetricE2ELatencyCount)
	if first == nil {
		return Load{}, false
	}
	a, b := first.Metrics.Metrics.Extra, last.Metrics.Metrics.Extra
	dt := last.At.Sub(first.At).Seconds()
	done := b[probes.MetricE2ELatencyCount] - a[probes.MetricE2ELatencyCount]
	if done <= 0 || dt <= 0 {
		return Load{}, false
	}
	latency := (b[probes.MetricE2ELatencySum] - a[probes.MetricE2ELatencySum]) / done
	var queue float64
	if qd := b[probes.MetricQueueTimeCount] - a[probes.MetricQueueTimeCount]; qd > 0 {
		queue = (b[probes.MetricQueueTimeSum] - a[probes.MetricQueueTimeSum]) / qd
	}
	queue = math.Min(math.Max(queue, 0), latency)
	l = Load{
		Window:            last.At.Sub(first.At),
		CompletionsPerSec: done / dt,
		MeanLatency:       fromSeconds(latency),
		MeanQueue:         fromSeconds(queue),
	}
	l.InFlight = l.CompletionsPerSec * latency
	l.Executing = l.CompletionsPerSec * (latency - queue)
	l.RecommendedCap = max(1, int(math.Ceil(l.Executing*1.1)))
	l.Saturated = latency > 0 && queue/latency > 0.05
	return l, true
}

func fromSeconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
