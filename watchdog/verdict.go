package watchdog

import "time"

// State is the classifier's answer (DESIGN.md section 3).
type State string

// The states, in the order Classify tries them (first match wins).
const (
	StateLoading       State = "loading"
	StateDown          State = "down"
	StateMisconfigured State = "misconfigured"
	StateHung          State = "hung"
	StateSaturated     State = "saturated"
	StateHealthy       State = "healthy"
	StateUnknown       State = "unknown"
)

// NeedsRecovery reports whether the state calls for drain + restart.
func (s State) NeedsRecovery() bool { return s == StateHung || s == StateDown }

// Evidence is what vigil saw, carried in every verdict, page and diagnose
// report. Rates are per second over Window.
type Evidence struct {
	// Window is the span of samples the verdict looked at.
	Window  time.Duration `json:"window_seconds"`
	Samples int           `json:"samples"`

	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`

	// ProgressDelta is the rise of the progress counters (prompt +
	// generation tokens) across Window; TokensPerSec the same per second.
	ProgressDelta float64 `json:"progress_delta"`
	TokensPerSec  float64 `json:"tokens_per_second"`
	// HeartbeatDeltas is the rise of each heartbeat counter across Window.
	HeartbeatDeltas map[string]float64 `json:"heartbeat_deltas,omitempty"`
	// SinceProgress is how long no progress signal has moved.
	SinceProgress time.Duration `json:"since_progress_seconds"`
	// LongestGap is the longest stretch between counter moves seen while
	// work was pending; hang_after must exceed it.
	LongestGap time.Duration `json:"longest_gap_seconds"`

	// Models, Health and Probe are one-line outcomes, e.g. "200 in 4ms",
	// "refused", "timeout after 90s", "outstanding for 40s".
	Models       string        `json:"models"`
	Health       string        `json:"health"`
	Probe        string        `json:"probe"`
	ProbeLatency time.Duration `json:"probe_latency_seconds"`
	// MetricsError is why the last scrape was unreadable ("" if it was fine).
	MetricsError string `json:"metrics_error,omitempty"`

	// CompletionsPerSec is the finished-request rate; DrainEstimate the
	// time to clear the waiting queue at that rate (0 if unknown).
	CompletionsPerSec float64       `json:"completions_per_second"`
	DrainEstimate     time.Duration `json:"drain_estimate_seconds"`
}

// Verdict is one classification: the state, a one-line reason an operator
// can act on, and the evidence behind it.
type Verdict struct {
	State    State     `json:"state"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	Evidence Evidence  `json:"evidence"`
}
