package admission

import "sync"

// inFlight follows the upstream calls in flight and the longest prompt
// among them: the prefill the engine may legitimately be silent for, and
// whose chunks delay every other request's decode, which the watchdog
// sizes hang_after by (hang_after: auto). A call counts until it is done,
// not only until its first byte: the decode steps right after a long
// prefill are as slow as its chunks were, and a unary call's first byte is
// its whole answer anyway.
type inFlight struct {
	mu    sync.Mutex
	calls map[*upstreamCall]struct{}
}

// upstreamCall is one call sent to the engine.
type upstreamCall struct{ prompt int }

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

// done forgets the call.
func (f *inFlight) done(c *upstreamCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.calls, c)
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

// InFlightPrefill is how many calls the limiter has sent to the engine
// now, and the estimated prompt tokens of the longest of them.
func (l *Limiter) InFlightPrefill() (calls, longestPrompt int) { return l.inflight.snapshot() }
