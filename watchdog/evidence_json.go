package watchdog

import (
	"encoding/json"
	"time"
)

// evidenceJSON is Evidence with its durations in seconds, as its JSON
// names (window_seconds, ...) promise to scripts reading `diagnose --json`
// and /status.
type evidenceJSON struct {
	Window            float64            `json:"window_seconds"`
	Samples           int                `json:"samples"`
	Waiting           *float64           `json:"waiting,omitempty"`
	Running           *float64           `json:"running,omitempty"`
	ProgressDelta     *float64           `json:"progress_delta,omitempty"`
	TokensPerSec      *float64           `json:"tokens_per_second,omitempty"`
	HeartbeatDeltas   map[string]float64 `json:"heartbeat_deltas,omitempty"`
	SinceProgress     *float64           `json:"since_progress_seconds,omitempty"`
	LongestGap        *float64           `json:"longest_gap_seconds,omitempty"`
	Stalled           float64            `json:"stalled_seconds"`
	Paused            float64            `json:"paused_seconds,omitempty"`
	CounterReset      bool               `json:"counter_reset,omitempty"`
	Models            string             `json:"models"`
	Health            string             `json:"health"`
	Probe             string             `json:"probe"`
	ProbeLatency      float64            `json:"probe_latency_seconds"`
	MetricsError      string             `json:"metrics_error,omitempty"`
	CompletionsPerSec *float64           `json:"completions_per_second,omitempty"`
	ThroughVigilRate  bool               `json:"completions_through_vigil,omitempty"`
	DrainEstimate     float64            `json:"drain_estimate_seconds,omitempty"`
	Hang              HangKind           `json:"hang,omitempty"`
	Ranks             []rankJSON         `json:"ranks,omitempty"`
	DecodeStalled     float64            `json:"decode_stalled_seconds,omitempty"`
	Unanswered        float64            `json:"unanswered_seconds,omitempty"`
	ThroughVigil      *throughVigilJSON  `json:"through_vigil,omitempty"`
	ProbeFailing      string             `json:"probe_failing,omitempty"`
	Odd               []string           `json:"odd,omitempty"`
	Serving           bool               `json:"serving,omitempty"`
	HangAfter         float64            `json:"hang_after_seconds"`
	HangAfterWhy      string             `json:"hang_after_why,omitempty"`
	HangAfterFrom     string             `json:"hang_after_from,omitempty"`
	ShedRate          float64            `json:"shed_rate,omitempty"`
	ShedCalls         uint64             `json:"shed_calls,omitempty"`
	LimiterQueued     int                `json:"limiter_queued,omitempty"`
	LimiterOnly       bool               `json:"limiter_only,omitempty"`
	Stale             float64            `json:"stale_seconds,omitempty"`
}

type throughVigilJSON struct {
	Answered uint64  `json:"answered"`
	Silent   float64 `json:"silent_seconds"`
}

type rankJSON struct {
	Rank    string  `json:"rank"`
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
	Stalled float64 `json:"stalled_seconds"`
	Hung    bool    `json:"hung,omitempty"`
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func duration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// MarshalJSON writes durations as seconds.
func (e Evidence) MarshalJSON() ([]byte, error) {
	return json.Marshal(evidenceJSON{
		Window: seconds(e.Window), Samples: e.Samples,
		Waiting: knownOnly(e.Waiting, e.QueueKnown()), Running: knownOnly(e.Running, e.QueueKnown()),
		ProgressDelta: knownOnly(e.ProgressDelta, e.RatesKnown()), TokensPerSec: knownOnly(e.TokensPerSec, e.RatesKnown()),
		HeartbeatDeltas: e.HeartbeatDeltas,
		SinceProgress:   knownOnly(seconds(e.SinceProgress), e.RatesKnown()), LongestGap: knownOnly(seconds(e.LongestGap), e.RatesKnown()),
		Stalled: seconds(e.Stalled), Paused: seconds(e.Paused), CounterReset: e.CounterReset,
		Models: e.Models, Health: e.Health, Probe: e.Probe,
		ProbeLatency: seconds(e.ProbeLatency), MetricsError: e.MetricsError,
		CompletionsPerSec: knownOnly(e.CompletionsPerSec, e.CompletionsKnown), ThroughVigilRate: e.CompletionsThroughVigil,
		DrainEstimate: seconds(e.DrainEstimate),
		Hang:          e.Hang, Ranks: ranksJSON(e.Ranks), DecodeStalled: seconds(e.DecodeStalled),
		Unanswered: seconds(e.Unanswered), ThroughVigil: throughJSON(e.ThroughVigil),
		ProbeFailing: e.ProbeFailing, Odd: e.Odd, Serving: e.Serving,
		HangAfter: seconds(e.HangAfter), HangAfterWhy: e.HangAfterWhy, HangAfterFrom: e.HangAfterFrom,
		ShedRate: e.ShedRate, ShedCalls: e.ShedCalls, LimiterQueued: e.LimiterQueued, LimiterOnly: e.LimiterOnly,
		Stale: seconds(e.Stale),
	})
}

func throughJSON(t *ThroughVigil) *throughVigilJSON {
	if t == nil {
		return nil
	}
	return &throughVigilJSON{Answered: t.Answered, Silent: seconds(t.Silent)}
}

func ranksJSON(rs []RankEvidence) []rankJSON {
	if len(rs) == 0 {
		return nil
	}
	out := make([]rankJSON, len(rs))
	for i, r := range rs {
		out[i] = rankJSON{Rank: r.Rank, Waiting: r.Waiting, Running: r.Running, Stalled: seconds(r.Stalled), Hung: r.Hung}
	}
	return out
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Evidence) UnmarshalJSON(b []byte) error {
	var j evidenceJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Evidence{
		Window: duration(j.Window), Samples: j.Samples,
		Waiting: valueOf(j.Waiting), Running: valueOf(j.Running),
		ProgressDelta: valueOf(j.ProgressDelta), TokensPerSec: valueOf(j.TokensPerSec), NoRates: j.TokensPerSec == nil,
		HeartbeatDeltas: j.HeartbeatDeltas,
		SinceProgress:   duration(valueOf(j.SinceProgress)), LongestGap: duration(valueOf(j.LongestGap)),
		Stalled: duration(j.Stalled), Paused: duration(j.Paused), CounterReset: j.CounterReset,
		Models: j.Models, Health: j.Health, Probe: j.Probe,
		ProbeLatency: duration(j.ProbeLatency), MetricsError: j.MetricsError,
		CompletionsPerSec: valueOf(j.CompletionsPerSec), CompletionsKnown: j.CompletionsPerSec != nil,
		CompletionsThroughVigil: j.ThroughVigilRate,
		DrainEstimate:           duration(j.DrainEstimate),
		Hang:                    j.Hang, DecodeStalled: duration(j.DecodeStalled), Unanswered: duration(j.Unanswered),
		ProbeFailing: j.ProbeFailing, Odd: j.Odd, Serving: j.Serving,
		HangAfter: duration(j.HangAfter), HangAfterWhy: j.HangAfterWhy, HangAfterFrom: j.HangAfterFrom,
		ShedRate: j.ShedRate, ShedCalls: j.ShedCalls, LimiterQueued: j.LimiterQueued, LimiterOnly: j.LimiterOnly,
		Stale: duration(j.Stale),
	}
	if t := j.ThroughVigil; t != nil {
		e.ThroughVigil = &ThroughVigil{Answered: t.Answered, Silent: duration(t.Silent)}
	}
	for _, r := range j.Ranks {
		e.Ranks = append(e.Ranks, RankEvidence{Rank: r.Rank, Waiting: r.Waiting, Running: r.Running, Stalled: duration(r.Stalled), Hung: r.Hung})
	}
	return nil
}

// QueueKnown reports whether Waiting and Running were read: the last
// scrape was readable (a llama-server started without --metrics answers
// 501, and its queue is unknown, not 0).
func (e Evidence) QueueKnown() bool { return e.MetricsError == "" }

// RatesKnown reports whether ProgressDelta and TokensPerSec were measured:
// two readable scrapes in the window.
func (e Evidence) RatesKnown() bool { return !e.NoRates }

// knownOnly is v when it is known; nil leaves an unknown figure out of the
// JSON rather than writing it as 0.
func knownOnly(v float64, known bool) *float64 {
	if !known {
		return nil
	}
	return &v
}

func valueOf(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
