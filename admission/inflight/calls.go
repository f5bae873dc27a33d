package inflight

import (
	"context"
	"sync"
	"sync/atomic"
)

// Calls follows the upstream calls in flight and the longest prompt
// among them: the prefill the engine may legitimately be silent for, and
// whose chunks delay every other request's decode, which the watchdog
// sizes hang_after by (hang_after: auto). A call counts until it is done,
// not only until its first byte: the decode steps right after a long
// prefill are as slow as its chunks were, and a unary call's first byte is
// its whole answer anyway.
//
// It also counts, since the limiter started, the reads of the engine's
// answers and the calls the engine answered (Counts): the watchdog's
// evidence that the engine serves while its API server times out on every
// probe (a wedge under load is not hung while bytes flow to vigil's
// clients).
type Calls struct {
	mu    sync.Mutex
	calls map[*Call]struct{}

	reads, answered atomic.Uint64
}

// Call is one call sent to the engine; cut ends it when the engine is
// lost (nil: the call is not cut, it fails with the engine).
type Call struct {
	prompt int
	cut    context.CancelCauseFunc
}

// Start records a call with its estimated prompt tokens.
func (f *Calls) Start(prompt int, cut context.CancelCauseFunc) *Call {
	c := &Call{prompt: prompt, cut: cut}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[*Call]struct{}{}
	}
	f.calls[c] = struct{}{}
	return c
}

// Done forgets the call; answered: the engine's answer came to its end,
// and it is counted.
func (f *Calls) Done(c *Call, answered bool) {
	if answered {
		f.answered.Add(1)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, c)
}

// Read notes bytes of an answer from the engine.
func (f *Calls) Read() { f.reads.Add(1) }

// Counts is the reads of the engine's answers and the calls it answered,
// since the start.
func (f *Calls) Counts() (reads, answered uint64) { return f.reads.Load(), f.answered.Load() }

// InterruptAll cuts every call in flight that can be cut, with cause.
func (f *Calls) InterruptAll(cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.calls {
		if c.cut != nil {
			c.cut(cause)
		}
	}
}

// Snapshot is the calls in flight and the longest prompt among them (0:
// none).
func (f *Calls) Snapshot() (n, longest int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.calls {
		longest = max(longest, c.prompt)
	}
	return len(f.calls), longest
}
