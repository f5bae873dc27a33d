package admission

import "sync"

// inFlight follows the upstream calls in flight and, of those still
// awaiting their first byte, the longest prompt: the prefill the engine
// may legitimately be silent for, which the watchdog sizes hang_after by
// (hang_after: auto). A unary call's first byte is its whole answer, so
// it counts as prefilling until then: the safe side for the window.
type inFlight struct {
	mu    sync.Mutex
	calls map[*upstreamCall]struct{}
}

// upstreamCall is one call sent to the engine.
type upstreamCall struct {
	prompt int
	first  bool
}

// start records a call with its estimated prompt tokens.
func (f *inFlight) start(prompt int) *upstreamCall {
	c := &upstreamCall{prompt: prompt}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[*upstreamCall]struct{}{}
	}
	f.calls[c] = struct{}{}
	return c
}

// firstByte marks the call's prefill done.
func (f *inFlight) firstByte(c *upstreamCall) {
	if c == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c.first = true
}

// done forgets the call.
func (f *inFlight) done(c *upstreamCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, c)
}

// snapshot is the calls in flight and the longest prompt awaiting its
// first byte (0: none).
func (f *inFlight) snapshot() (n, longest int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.calls {
		if !c.first {
			longest = max(longest, c.prompt)
		}
	}
	return len(f.calls), longest
}

// InFlightPrefill is how many calls the limiter has sent to the engine
// now, and the estimated prompt tokens of the longest still awaiting its
// first byte.
func (l *Limiter) InFlightPrefill() (calls, longestPrompt int) { return l.inflight.snapshot() }
