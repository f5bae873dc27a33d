package core

import (
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// Limit is what every in-flight cap has: a value, and the watchdog's
// verdict that the engine is saturated. The automatic cap (NewAuto, the
// default) and a fixed one (NewFixed) are Limits; what else a Limit does
// it says by the small interfaces below, and the core calls each part
// only on a Limit that has it. Every call is made under the core's lock,
// with the time it happened, so an implementation needs no lock or clock
// of its own. Calls that report a bool report whether the cap changed, so
// freed room is handed to the queue at once.
type Limit interface {
	// Limit is the cap now, before slow start.
	Limit() int
	// SetSaturated is the watchdog's verdict that the engine progresses
	// under a deep queue of its own (see Limiter.SetSaturated).
	SetSaturated(on bool, now time.Time)
}

// EngineReader is a Limit that follows the engine's load: one reading of
// its queue gauges, KV usage and prefill counters at a time.
type EngineReader interface {
	OnEngine(g EngineLoad, now time.Time) bool
}

// Learner is a Limit that learns from the answers.
type Learner interface {
	// OnSample: an answer ended, successfully or dropped by the engine.
	OnSample(s Sample, now time.Time) bool
	// OnFirstToken: a streamed answer's first byte came ttft after its
	// request was sent upstream.
	OnFirstToken(admitted time.Time, ttft time.Duration, now time.Time) bool
}

// Prober is a Limit that probes for the engine's capacity: it grows only
// while the cap is used, and probes again after the engine restarts.
type Prober interface {
	// OnDemand: a request found the cap full.
	OnDemand()
	// Restart: the engine came back from a restart; its capacity may
	// differ from the old one's.
	Restart(now time.Time)
}

// FirstTokenLimiter is a Limit that also bounds the streams awaiting their
// first token at once (admitted, no byte of the answer yet).
type FirstTokenLimiter interface {
	// FirstTokenLimit is that bound now; 0: none.
	FirstTokenLimit() int
	// OnFirstTokenDemand: a stream found the bound full while the cap had
	// room.
	OnFirstTokenDemand()
}

// Objectiver is a Limit that keeps first tokens within an objective it
// derives (ttft_target: auto); the core budgets a stream's queue wait
// against it.
type Objectiver interface {
	// Objective is the TTFT objective in force.
	Objective() time.Duration
}

// The parts each cap has; the core finds them by type assertion, so one
// missing here would silently go unused.
var (
	_ interface {
		Limit
		EngineReader
		Learner
		Prober
		FirstTokenLimiter
		Objectiver
	} = (*autoLimit)(nil)
	_ interface {
		Limit
		EngineReader
	} = (*fixedCap)(nil)
)

// Sample is one answer that ended: a success or a drop (an upstream
// failure). Answers cancelled or refused by the engine are no sample.
type Sample struct {
	Admitted time.Time
	Dropped  bool
	// Deadline is the client's timeout (announced or inferred); 0: none.
	Deadline time.Duration
	Streamed bool
	// InFlight: the mean number of requests in flight while it ran, itself
	// included.
	InFlight int
	// Size is its work for the engine in decode steps (answerSize).
	Size int
}

// Exported figures of the automatic cap, for the transport's tests and
// docs.
const (
	AutoInitial    = autoInitial    // the automatic cap's start
	ServiceSamples = serviceSamples // answers per service-time estimate
	RetryFloor     = retryFloor     // budgeted retries always allowed per window
)

// NewAuto is the automatic cap (see autoLimit): no capacity figure, only
// the TTFT objective (auto: derived; a fixed 0: none) and the engine's
// max_num_seqs when known (engine_max_seqs; 0: vLLM's default).
func NewAuto(ttftTarget configs.AutoDuration, seats int, now time.Time) Limit {
	target := ttftTarget.Duration()
	if ttftTarget.IsAuto() {
		target = autoObjective
	}
	return newAutoLimit(target, seats, now)
}

// autoObjective is ttft_target: auto inside the law (autoLimit.target,
// newFirstTokenGate), which takes the objective as one duration; no
// configured objective is negative. The config's own value is typed
// (configs.AutoDuration); NewAuto translates it.
const autoObjective time.Duration = -1

func (a *autoLimit) Limit() int { return a.cap() }

func (a *autoLimit) OnEngine(g EngineLoad, now time.Time) bool {
	return a.observeLoad(g, now)
}

func (a *autoLimit) OnSample(s Sample, now time.Time) bool {
	if s.Dropped {
		return a.drop(s.Admitted, now)
	}
	return a.observeDone(s.Admitted, now, s.Deadline, s.Streamed, s.InFlight, s.Size)
}

// OnFirstToken feeds the cap's TTFT evidence and the first-token limit.
func (a *autoLimit) OnFirstToken(admitted time.Time, ttft time.Duration, now time.Time) bool {
	return a.observeTTFT(admitted, ttft, now)
}

func (a *autoLimit) OnDemand() { a.markDemand() }

// Objective is the objective the cap and the first-token limit keep: the
// configured ttft_target, or the one derived from the engine with auto.
func (a *autoLimit) Objective() time.Duration {
	return time.Duration(a.gate.objective() * float64(time.Second))
}

// FirstTokenLimit is the first-token limit's bound (see firstTokenGate).
func (a *autoLimit) FirstTokenLimit() int { return a.gate.bound() }

func (a *autoLimit) OnFirstTokenDemand() { a.gate.markDemand() }

// SetSaturated stops growth while it holds, and cuts the cap by a quarter
// once when it starts (neither on a prefill backlog: see tighten).
func (a *autoLimit) SetSaturated(on bool, now time.Time) {
	was := a.hold
	a.hold = on
	if on && !was {
		a.tighten(now)
	}
}

// Restart forgets the evidence and probes again, from at least the
// initial cap (never past the engine's own seats: see startState).
func (a *autoLimit) Restart(now time.Time) {
	keep := max(a.limit, autoInitial)
	a.reset(now)
	a.limit = a.start.bound(keep)
}

// saturatedShare of a fixed cap stays admitted while the watchdog reports
// the engine saturated.
const saturatedShare = 0.75

// fixedCap is a cap set by the operator (max_in_flight, or an override).
type fixedCap struct {
	n         int
	saturated bool
	// backlog: the engine's last reading was a prefill backlog of long
	// prompts on an engine with room, which the saturated verdict (it
	// counts waiting requests) reads as a full engine.
	backlog bool
	prefill prefillMeter
}

// NewFixed is a fixed cap of n (> 0); it admits 3/4 of itself while the
// engine is reported saturated, unless the engine's queue is long prompts
// waiting for prefill on an engine with room (seats: engine_max_seqs).
func NewFixed(n, seats int) Limit { return &fixedCap{n: n, prefill: newPrefillMeter(seats)} }

func (f *fixedCap) Limit() int {
	if f.saturated && !f.backlog {
		return max(1, int(float64(f.n)*saturatedShare))
	}
	return f.n
}

// OnEngine follows the engine only to tell a prefill backlog from a full
// engine; the cap changes only when that flips under a saturated verdict.
func (f *fixedCap) OnEngine(g EngineLoad, now time.Time) bool {
	f.prefill.note(g, now)
	was := f.Limit()
	f.backlog = f.prefill.isBacklog(g)
	return f.Limit() != was
}

func (f *fixedCap) SetSaturated(on bool, _ time.Time) { f.saturated = on }
