package admission

import (
	"context"
	"sync"
	"sync/atomic"
)

// inFlight follows the upstream calls in flight and the longest prompt
// among them: the prefill the engine may legitimately be silent for, and
// whose chunks delay every other request's decode, which the watchdog
// sizes hang_after by (hang_after: auto). A call counts until it is done,
// not only until its first byte: the decode steps right after a long
// prefill are as slow as its chunks were, and a unary call's first byte is
// its whole answer anyway.
//
// It also counts, since the limiter started, the reads of the engine's
// answers and the calls the engine answered: the watchdog's evidence that
// the engine serves while its API server times out on every probe (a
// wedge under load is not hung while bytes flow to vigil's clients).
type inFlight struct {
	mu    sync.Mutex
	calls map[*upstreamCall]struct{}

	reads, answered atomic.Uint64
}

// upstreamCall is one call sent to the engine; cut ends it when the
// engine is lost (nil: the call is not cut, it fails with the engine).
type upstreamCall struct {
	prompt int
	cut    context.CancelCauseFunc
}

// start records a call with its estimated prompt tokens.
func (f *inFlight) start(prompt int, cut context.CancelCauseFunc) *upstreamCall {
	c := &upstreamCall{prompt: prompt, cut: cut}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[*upstreamCall]struct{}{}
	}
	f.calls[c] = struct{}{}
	return c
}

// read notes bytes of an answer from the engine.
func (f *inFlight) read() { f.reads.Add(1) }

// done forgets the call; answered: the engine's answer came to its end.
func (f *inFlight) done(c *upstreamCall, answered bool) {
	if answered {
		f.answered.Add(1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, c)
}

// interruptAll cuts every call in flight that can be cut, with cause.
func (f *inFlight) interruptAll(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.calls {
		if c.cut != nil {
			c.cut(cause)
		}
	}
}

// snapshot is the calls in flight and the longest prompt among them (0:
// none).
func (f *inFlight) snapshot() (n, longest int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.calls {
		longest = max(longest, c.prompt)
	}
	return len(f.calls), longest
}

// Load is the limiter's side of the engine's load, what the watchdog
// reads each cycle (it converts to watchdog.LimiterLoad, field for field):
// calls seen and answered 429/503 by the limiter itself since it started,
// calls in its queue, calls sent to the engine now and the estimated
// prompt tokens of the longest of them; and since it started, the reads
// of the engine's answers (EngineReads: any byte, of any call it sent the
// engine) and the calls the engine answered to their end (Answered).
type Load struct {
	Calls, Shed                     uint64
	Queued, InFlight, LongestPrompt int
	EngineReads, Answered           uint64
}

// Load reads the limiter's side of the load now.
func (l *Limiter) Load() Load {
	st := l.Stats()
	ld := Load{Calls: st.Calls, Queued: st.QueueDepth}
	for _, n := range st.Rejected {
		ld.Shed += n
	}
	ld.InFlight, ld.LongestPrompt = l.inflight.snapshot()
	ld.EngineReads, ld.Answered = l.inflight.reads.Load(), l.inflight.answered.Load()
	return ld
}
