package core

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Listener is a granted slot plus the quota charges made for it. Exactly
// one of Ignore (the request never reached the engine) or Release (it did)
// ends it; later calls do nothing. (go-concurrency-limits' Listener, with
// OnSuccess and OnDropped folded into one Release that says which.)
type Listener struct {
	l        *Limiter
	admitted time.Time
	tenant   *tenantState
	tokens   int
	prompt   int // the estimate of tokens' prompt part
	retry    bool
	deadline time.Duration // the client's timeout; 0: none
	// inFlightAt: requests in flight when this one was admitted, itself
	// included; areaAt: the limiter's inFlightArea then.
	inFlightAt int
	areaAt     float64
	ended      atomic.Bool
	// stream: a streamed request; awaiting: admitted, its first token not
	// yet seen (counted in the Limiter's awaitingFirst). Under the
	// Limiter's lock.
	stream, awaiting bool
	// heldWait: it waited in the queue past its bound while the engine
	// was held (see Limiter.expire).
	heldWait bool
}

// startAwaitingLocked counts a stream just admitted as awaiting its first
// token.
func (lis *Listener) startAwaitingLocked() {
	if lis.stream {
		lis.awaiting = true
		lis.l.awaitingFirst++
	}
}

// stopAwaitingLocked: the stream's first token came, or its slot ended
// without one.
func (lis *Listener) stopAwaitingLocked() {
	if lis.awaiting {
		lis.awaiting = false
		lis.l.awaitingFirst--
	}
}

// Prompt is the request's estimated prompt tokens, for reading an answer
// that does not report its usage.
func (lis *Listener) Prompt() int { return lis.prompt }

// Output is the request's estimated output tokens (what it may ask for).
func (lis *Listener) Output() int { return max(0, lis.tokens-lis.prompt) }

// HeldWait reports whether the request waited in the queue past its
// bound while the engine was held (suspected, recovered, ramping).
func (lis *Listener) HeldWait() bool { return lis.heldWait }

// Stream reports whether the request's answer is streamed.
func (lis *Listener) Stream() bool { return lis.stream }

// Outcome is what the request's upstream call reports when it ends.
type Outcome struct {
	Dropped   bool // upstream failure: 5xx, refused, reset mid-answer
	Cancelled bool // cancelled here (client gone, deferral expired)
	Success   bool // 2xx, read to the end
	Streamed  bool // a streamed answer
	// CompletionTokens and TotalTokens from the answer's usage (or its
	// stream's events); -1: unknown.
	CompletionTokens, TotalTokens int
}

// Ignore ends a slot whose request never reached the engine: the slot is
// freed and the quota charges refunded.
func (lis *Listener) Ignore() {
	if lis.ended.Swap(true) {
		return
	}
	l := lis.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	lis.stopAwaitingLocked()
	l.addInFlightLocked(now, -1)
	l.undoLocked(now, lis)
	l.dispatchLocked(now)
}

// Release ends a slot whose request reached the engine: frees the slot,
// corrects the tenant's token charge and feeds the cap in force.
func (lis *Listener) Release(o Outcome) {
	if lis.ended.Swap(true) {
		return
	}
	l := lis.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	n := l.meanInFlightLocked(lis, now)
	lis.stopAwaitingLocked()
	l.addInFlightLocked(now, -1)
	if lis.tenant != nil {
		lis.tenant.finish(now, lis.tokens, o.TotalTokens)
	}
	if !o.Cancelled {
		l.completions.add(now)
	}
	if o.Success && !o.Streamed {
		l.engineService = ewma(l.engineService, now.Sub(lis.admitted))
		l.answers.add(now.Sub(lis.admitted))
	}
	if lr, ok := l.limitLocked().(Learner); ok && (o.Dropped || o.Success) {
		lr.OnSample(Sample{Admitted: lis.admitted, Dropped: o.Dropped, Deadline: lis.deadline,
			Streamed: o.Streamed, InFlight: n, Size: lis.size(o)}, now)
	}
	l.dispatchLocked(now)
}

// size is the answer's work for the engine (answerSize): its output and
// prompt tokens as the answer's usage (or its stream's events) tells, else
// as estimated at admission (max_tokens, the body's length).
func (lis *Listener) size(o Outcome) int {
	prompt, output := lis.prompt, lis.tokens-lis.prompt
	if o.CompletionTokens >= 0 {
		output = o.CompletionTokens
		if o.TotalTokens >= o.CompletionTokens {
			prompt = o.TotalTokens - o.CompletionTokens
		}
	}
	return answerSize(prompt, output)
}

// FirstToken feeds a streamed answer's upstream time to first byte (its
// TTFT) to the cap as soon as it is known.
func (lis *Listener) FirstToken(ttft time.Duration) {
	l := lis.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if lis.awaiting {
		lis.stopAwaitingLocked()
		defer l.dispatchLocked(now) // room under the first-token limit
	}
	l.engineTTFT = ewma(l.engineTTFT, ttft)
	if lr, ok := l.limitLocked().(Learner); ok && lr.OnFirstToken(lis.admitted, ttft, now) {
		l.dispatchLocked(now)
	}
}

func tenantMessage(t *tenantState, v quotaVerdict) string {
	switch {
	case v.never:
		return fmt.Sprintf("This request needs more tokens than the key's whole quota of %d per minute; "+
			"reduce max_tokens or the prompt.", t.limits.TPM)
	case v.reason == ReasonTenantRPM:
		return fmt.Sprintf("Rate limit reached: %d requests per minute for this key.", t.limits.RPM)
	case v.reason == ReasonTenantTPM:
		return fmt.Sprintf("Rate limit reached: %d tokens per minute for this key.", t.limits.TPM)
	default:
		return fmt.Sprintf("Concurrency limit reached: %d requests at a time for this key.", t.limits.MaxInFlight)
	}
}

// ewma moves an average of about the last ten samples (ttftWeight) to x;
// the first sample (avg 0) sets it.
func ewma(avg, x time.Duration) time.Duration {
	if avg == 0 {
		return x
	}
	return avg + time.Duration(ttftWeight*float64(x-avg))
}
