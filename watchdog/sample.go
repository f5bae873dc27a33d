package watchdog

import (
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
)

// Sample is one cycle's observations of the engine, time-stamped.
type Sample struct {
	At      time.Time                 `json:"at"`
	Models  probes.ModelsObservation  `json:"models"`
	Health  probes.Observation        `json:"health"`
	Metrics probes.MetricsObservation `json:"metrics"`
	// Probe is the completion probe as polled this cycle: the one in
	// flight, or the last one finished.
	Probe probes.CompletionStatus `json:"probe"`
	// Limiter is what the admission limiter in front of the engine had
	// done by this cycle; nil without a limiter.
	Limiter *LimiterLoad `json:"limiter,omitempty"`
	// Asleep: the engine said it was put to sleep on purpose (vLLM's
	// sleep mode, GET /is_sleeping).
	Asleep bool `json:"asleep,omitempty"`
}

// LimiterLoad is the admission limiter's side of the load: with the
// limiter in front, the engine's own queue stays shallow by design, and
// saturation shows here instead.
type LimiterLoad struct {
	// Calls and Shed count attempts seen and answered 429/503 by the
	// limiter itself, since it started.
	Calls uint64 `json:"calls"`
	Shed  uint64 `json:"shed"`
	// Queued is how many calls wait in the limiter's queue now.
	Queued int `json:"queued"`
	// InFlight is how many calls the limiter has sent to the engine now;
	// LongestPrompt the estimated prompt tokens of the longest of them (0:
	// none): the prefill the engine may legitimately be silent for.
	InFlight      int `json:"in_flight"`
	LongestPrompt int `json:"longest_prompt,omitempty"`
	// EngineReads counts reads of the engine's answers to the calls the
	// limiter sent it (any byte), and Answered the calls it answered to
	// their end, since the limiter started: an engine whose API server
	// times out on every probe while these move serves (not wedged).
	EngineReads uint64 `json:"engine_reads,omitempty"`
	Answered    uint64 `json:"answered,omitempty"`
}

// readable reports a scrape with usable values.
func (s *Sample) readable() bool { return s.Metrics.Readable() }

// pending reports whether work was waiting on the engine at this sample:
// queued or running requests, or our own probe unanswered. ok is false
// when it cannot tell (scrape unreadable and our probe not pending).
func (s *Sample) pending() (pending, ok bool) {
	if s.Probe.Pending() {
		return true, true
	}
	if !s.readable() {
		return false, false
	}
	m := s.Metrics.Metrics
	return m.Waiting+m.Running > 0, true
}

// pendingSince is the earliest moment the work seen at this sample was
// known to be pending: our probe's send time if it is the one pending.
func (s *Sample) pendingSince() time.Time {
	if s.Probe.Pending() && !s.Probe.Started.IsZero() && s.Probe.Started.Before(s.At) {
		return s.Probe.Started
	}
	return s.At
}

// unauthorized names the first endpoint that answered 401/403, or "".
func (s *Sample) unauthorized() *probes.Observation {
	for _, o := range []*probes.Observation{&s.Models.Observation, &s.Health, &s.Metrics.Observation, &s.Probe.Observation} {
		if o.Unauthorized() {
			return o
		}
	}
	return nil
}

// Thresholds are the classifier's tunables, the ones an operator may
// change on a live watchdog (SIGHUP, an override).
type Thresholds struct {
	// HangAfter: no progress for this long while work is pending is hung.
	// In Thresholds, 0 is auto (sized each cycle between HangAfterMin and
	// HangAfterMax); in the Params given to Classify it is the window in
	// force.
	HangAfter    time.Duration `json:"hang_after"`
	HangAfterMin time.Duration `json:"hang_after_min,omitempty"`
	HangAfterMax time.Duration `json:"hang_after_max,omitempty"`
	// SaturatedWaiting: waiting at or above this, with progress, is
	// saturated.
	SaturatedWaiting int `json:"saturated_waiting"`
	// SaturatedShed: the limiter shedding at least this share of calls is
	// saturated (0: off).
	SaturatedShed float64 `json:"saturated_shed,omitempty"`
	// ProbeSLO: a completion probe slower than this is a saturation sign.
	ProbeSLO time.Duration `json:"probe_slo"`
	// DownAfter: consecutive samples of refused/reset/5xx from /health or
	// /v1/models before down.
	DownAfter int `json:"down_after"`
	// StartupGrace: after a (re)start the engine is loading until it
	// serves or this elapses.
	StartupGrace time.Duration `json:"startup_grace"`
}

// ThresholdsFrom takes the thresholds from the watchdog config.
func ThresholdsFrom(w configs.Watchdog) Thresholds {
	return Thresholds{
		HangAfter:        w.HangAfter.Duration(), // 0 when auto, as here
		HangAfterMin:     w.HangAfterMin,
		HangAfterMax:     w.HangAfterMax,
		SaturatedWaiting: w.SaturatedWaiting,
		SaturatedShed:    w.SaturatedShed,
		ProbeSLO:         w.ProbeSLO,
		DownAfter:        w.DownAfter,
		StartupGrace:     w.StartupGrace,
	}
}

// Params are the classifier's thresholds and guard state.
type Params struct {
	Thresholds
	// LastStart is when the engine was last (re)started; zero: unknown,
	// no grace.
	LastStart time.Time
	// LastReady is when /v1/models last answered with a model list; it
	// tells "ready since the start" when history is too short to.
	LastReady time.Time
	// RateWindow: deltas and rates span the readable samples within this
	// window before the last one (0: the last two readable samples).
	RateWindow time.Duration
	// ProofSince, when set, is when the engine was last judged hung or
	// down in the open incident: a healthy verdict then needs positive
	// evidence after it (counters rising, or a probe sent after it
	// completing). Frozen idle gauges are no proof: a hung idle engine
	// shows them too, e.g. to a vigil that has just restarted.
	ProofSince time.Time
	// WindowWhy says how HangAfter was chosen ("" for a fixed one), and
	// WindowFrom what an automatic one was learned from.
	WindowWhy, WindowFrom string
	// Tolerance is how much short of HangAfter a stall may fall and still
	// reach it: a stall is the difference of two cycles' clocks, each read
	// a little late, so a stall of exactly n intervals measures a few
	// milliseconds either side of it, and a window of n intervals was met
	// one cycle late about half of the time. The loop sets a tenth of an
	// interval; 0 compares exactly.
	Tolerance time.Duration
	// Paused, when set, is how much of [a, b] (this clock's time) vigil's
	// own process was not running (pausemeter.Meter.Paused, on the same
	// clock): a stall is judged net of it, since what the engine did
	// meanwhile is read only when vigil runs again. nil: no pauses.
	Paused func(a, b time.Time) time.Duration `json:"-"`
}

// reached reports whether a stall of d reaches the window in force.
func (p Params) reached(d time.Duration) bool {
	return p.HangAfter > 0 && d > 0 && d+p.Tolerance >= p.HangAfter
}

// Ceiling is the longest HangAfter can be: the fixed value, or
// HangAfterMax when auto.
func (t Thresholds) Ceiling() time.Duration {
	if t.HangAfter == 0 {
		return t.HangAfterMax
	}
	return t.HangAfter
}

// ParamsFrom takes the thresholds from the watchdog config. LastStart and
// LastReady are the caller's to fill.
func ParamsFrom(w configs.Watchdog) Params { return Params{Thresholds: ThresholdsFrom(w)} }
