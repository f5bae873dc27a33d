package watchdog

import (
	"context"
	"time"
)

// State is the classifier's answer (docs/design.md section 3).
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
	// Stalled is how long no progress signal has moved while work was
	// pending (time under unreadable scrapes excluded): what hang_after is
	// compared with. Zero when idle or moving.
	Stalled time.Duration `json:"stalled_seconds"`
	// Paused is how much of the stall vigil's own process was not running
	// (Params.Paused): not counted in Stalled.
	Paused time.Duration `json:"paused_seconds,omitempty"`
	// CounterReset: a counter went down in the last interval, so the
	// engine restarted and the counters were re-baselined.
	CounterReset bool `json:"counter_reset,omitempty"`

	// Models, Health and Probe are one-line outcomes, e.g. "200 in 4ms",
	// "refused", "timeout after 90s", "outstanding for 40s".
	Models       string        `json:"models"`
	Health       string        `json:"health"`
	Probe        string        `json:"probe"`
	ProbeLatency time.Duration `json:"probe_latency_seconds"`
	// MetricsError is why the last scrape was unreadable ("" if it was fine).
	MetricsError string `json:"metrics_error,omitempty"`
	// HangAfter is the window the verdict judged stalls against, and
	// HangAfterWhy how it was chosen (hang_after: auto).
	HangAfter    time.Duration `json:"hang_after_seconds"`
	HangAfterWhy string        `json:"hang_after_why,omitempty"`
	// HangAfterFrom says what the automatic window was learned from: the
	// prefill rate and its source, the silences logged, the context length.
	HangAfterFrom string `json:"hang_after_from,omitempty"`
	// ShedRate is the share of calls the admission limiter answered
	// 429/503 itself over the last few cycles, of ShedCalls calls;
	// LimiterQueued the calls waiting in its queue. Zero without a limiter.
	ShedRate      float64 `json:"shed_rate,omitempty"`
	ShedCalls     uint64  `json:"shed_calls,omitempty"`
	LimiterQueued int     `json:"limiter_queued,omitempty"`
	// LimiterOnly: saturated at the limiter while the engine's own queue
	// is shallow; the limiter is not told to cut its cap for it.
	LimiterOnly bool `json:"limiter_only,omitempty"`
	// Stale is how long /metrics has shown the same counters while probes
	// sent after they froze completed: the scrape is stale (a cache, a
	// stuck exporter) and the probes judge alone. Zero otherwise.
	Stale time.Duration `json:"stale_seconds,omitempty"`

	// NoRates: fewer than two readable scrapes in the window, so
	// ProgressDelta and TokensPerSec are unknown, not 0.
	NoRates bool `json:"-"`

	// CompletionsPerSec is the finished-request rate, known only when
	// CompletionsKnown (the engine counts finished requests: llama.cpp does
	// not, and its rate is unknown, never 0); DrainEstimate the time to
	// clear the waiting queue at that rate (0 if unknown).
	CompletionsPerSec float64 `json:"completions_per_second"`
	CompletionsKnown  bool    `json:"completions_known"`
	// CompletionsThroughVigil: the engine counts no finished requests,
	// and CompletionsPerSec is the calls it answered through vigil's
	// limiter (not the calls that reached it some other way).
	CompletionsThroughVigil bool          `json:"completions_through_vigil,omitempty"`
	DrainEstimate           time.Duration `json:"drain_estimate_seconds"`

	// Hang says which kind of hang a hung verdict found: HangEngine (no
	// counter moved), HangRank (a data-parallel rank frozen while others
	// move), HangDecode (first tokens, no decode) or HangWedged (nothing
	// answers). Empty for other states.
	Hang HangKind `json:"hang,omitempty"`
	// Ranks lists each data-parallel rank when the engine has several.
	Ranks []RankEvidence `json:"ranks,omitempty"`
	// DecodeStalled is how long requests have had a first token and no
	// decode token (0 when decode moves or the engine lacks the counters).
	DecodeStalled time.Duration `json:"decode_stalled_seconds"`
	// Unanswered is how long every endpoint has timed out with no answer.
	Unanswered time.Duration `json:"unanswered_seconds"`
	// ThroughVigil is what the admission limiter saw of the engine while
	// every endpoint timed out (nil: no endpoint timing out, or no
	// limiter in front).
	ThroughVigil *ThroughVigil `json:"through_vigil,omitempty"`
	// ProbeFailing says why the completion probe keeps failing for a
	// reason other than load ("" when it does not).
	ProbeFailing string `json:"probe_failing,omitempty"`
	// Odd lists what does not fit a serving engine but is no reason to
	// restart it, e.g. "/v1/models answers 503 while counters move".
	Odd []string `json:"odd,omitempty"`
	// Serving: positive evidence that the engine serves, at the last
	// sample: counters rose, or the last probe completed.
	Serving bool `json:"serving,omitempty"`
}

// ThroughVigil is the engine's answers through vigil's limiter while its
// API server timed out on every probe.
type ThroughVigil struct {
	// Answered counts the calls the engine answered through the limiter
	// over Unanswered; Silent is how long no byte of any answer came
	// (Unanswered when none came).
	Answered uint64        `json:"answered"`
	Silent   time.Duration `json:"silent_seconds"`
}

// HangKind names the kind of hang a hung verdict found.
type HangKind string

// The kinds of hang.
const (
	HangEngine HangKind = "engine"
	HangRank   HangKind = "rank"
	HangDecode HangKind = "decode"
	HangWedged HangKind = "wedged"
)

// RankEvidence is one data-parallel rank as the verdict saw it.
type RankEvidence struct {
	Rank    string        `json:"rank"`
	Waiting float64       `json:"waiting"`
	Running float64       `json:"running"`
	Stalled time.Duration `json:"stalled_seconds"`
	Hung    bool          `json:"hung,omitempty"`
}

// Verdict is one classification: the state, a one-line reason an operator
// can act on, and the evidence behind it.
type Verdict struct {
	State    State     `json:"state"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
	Evidence Evidence  `json:"evidence"`
	// Recovering: vigil's own recovery is under way, so a DOWN or LOADING
	// verdict is the restart vigil performs, not a new failure to page.
	Recovering bool `json:"recovering,omitempty"`
}

// Incident is one stretch of trouble, from the first non-healthy verdict
// that counts to the verdict that resolves it. Pages thread under it.
type Incident struct {
	ID     string    `json:"id"`
	Opened time.Time `json:"opened"`
	// State is the current state; Peak the most severe seen (hung and down
	// outrank saturated, which outranks unknown).
	State   State     `json:"state"`
	Peak    State     `json:"peak"`
	Changed time.Time `json:"changed"`
	// Resolved is zero while the incident is open.
	Resolved time.Time `json:"resolved,omitzero"`
	// EngineSaturated: a saturated verdict in it saw the engine's own queue
	// deep (or its probe slow), not only the limiter shedding.
	EngineSaturated bool `json:"engine_saturated,omitempty"`
}

// Open reports whether the incident is still open.
func (i *Incident) Open() bool { return i != nil && i.Resolved.IsZero() }

// Pager is told every verdict with the incident it belongs to (nil when
// there is none), and decides what to page. It must never block the loop.
type Pager interface {
	Observe(v Verdict, inc *Incident)
}

// Recoverer repairs a hung or down engine (drain, restart, wait ready,
// restore). Recover returns at once; the sequence runs on its own.
type Recoverer interface {
	Recover(ctx context.Context, inc Incident, v Verdict)
	// Busy reports a recovery in progress: the watchdog keeps sampling
	// but does not ask again.
	Busy() bool
	// LastRestart is when vigil last restarted the engine (zero if never),
	// for the startup-grace rule.
	LastRestart() time.Time
}

// LimiterControl is the narrow view of the admission limiter the watchdog
// needs: tell it when the engine is saturated.
type LimiterControl interface {
	SetSaturated(bool)
}
