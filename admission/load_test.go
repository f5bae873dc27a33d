package admission

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// Load counts the engine's answers through the limiter, the watchdog's
// evidence that an engine whose API server times out on every probe still
// serves: a read of any answer's bytes, and an answer to its end. A call
// the engine never answers, and the limiter's own refusals, count neither.
func TestLoadCountsTheEnginesAnswersThroughTheLimiter(t *testing.T) {
	for _, tc := range []struct {
		name string
		// handle is the engine; hdr the call's headers; give up: the
		// client's timeout.
		handle       func(w http.ResponseWriter, r *http.Request)
		hdr          []string
		giveUp       time.Duration
		reads, calls bool // EngineReads and Answered move
	}{
		{name: "a call without a key, answered", handle: okJSON, reads: true, calls: true},
		{name: "a keyed call (its execution relays the answer), answered", handle: okJSON, hdr: []string{"Idempotency-Key", "k-1"}, reads: true, calls: true},
		{name: "an engine answering 500 answers", handle: func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
		}, reads: true, calls: true},
		{name: "an engine that answers nothing before the client leaves", giveUp: 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handle := tc.handle
			if handle == nil {
				// Silent until the test ends (the execution may outlive
				// its client, kept for a retry to adopt).
				release := make(chan struct{})
				handle = blockUntil(release)
				defer close(release)
			}
			eng := newFakeEngine(t, handle)
			p := startProxy(t, testConfig(), eng.srv.URL)
			before := p.l.Load()
			ctx := context.Background()
			if tc.giveUp > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.giveUp)
				defer cancel()
			}
			a := call(ctx, newClient(t), p.url, completionBody, tc.hdr...)
			if tc.giveUp == 0 && a.err != nil {
				t.Fatal(a.err)
			}
			if tc.giveUp == 0 {
				eventually(t, 2*time.Second, "the call done", func() bool { return p.l.Load().InFlight == 0 })
			}
			after := p.l.Load()
			if got := after.EngineReads > before.EngineReads; got != tc.reads {
				t.Errorf("engine reads %d -> %d, want moved %v", before.EngineReads, after.EngineReads, tc.reads)
			}
			if got := after.Answered - before.Answered; (got == 1) != tc.calls || got > 1 {
				t.Errorf("answered %d -> %d, want one more %v", before.Answered, after.Answered, tc.calls)
			}
		})
	}
}
