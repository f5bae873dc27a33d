package engineloss

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// hostLog is a Host on synctest's clock: the engine's counters advance
// from advanceAt on, a read of them takes readDelay (a frozen engine's
// /metrics timing out), and the run stops at end.
type hostLog struct {
	end, advanceAt time.Time
	readDelay      time.Duration
	mu             sync.Mutex
	reads          int
	events         []string
	suspectedAt    time.Time
}

func (h *hostLog) Now() time.Time { return time.Now() }
func (h *hostLog) Sleep(d time.Duration) bool {
	time.Sleep(d)
	return time.Now().Before(h.end)
}
func (h *hostLog) Recovering() bool { return false }
func (h *hostLog) ReadCounters() (Counters, bool) {
	time.Sleep(h.readDelay)
	h.mu.Lock()
	h.reads++
	h.mu.Unlock()
	if !h.advanceAt.IsZero() && !time.Now().Before(h.advanceAt) {
		return Counters{PromptTokens: 200, FirstTokens: 2}, true
	}
	return Counters{PromptTokens: 100, FirstTokens: 1}, true
}
func (h *hostLog) Suspect(now time.Time, _ Evidence) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.suspectedAt.IsZero() {
		h.suspectedAt = now
	}
	h.events = append(h.events, "suspect")
}
func (h *hostLog) Unsuspect() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "unsuspect")
}

// TestSuspicionRun: a call the engine never answers is suspected; the
// engine's counters advancing past the quiet spell's first read clear the
// suspicion (progress the bytes did not show); an off Suspicion notes
// nothing and never suspects.
func TestSuspicionRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		advance   time.Duration // when the counters advance (0: never)
		readDelay time.Duration // how long a read of them takes
		want      []string
	}{
		{"silent engine", 0, 0, []string{"suspect"}}, // and never cleared
		{"counters advance", 20 * time.Minute, 0, []string{"suspect", "unsuspect"}},
		// A frozen engine's /metrics times out as its calls do: the read
		// must not hold the checks (it did: suspected 2 s late).
		{"silent engine, reads time out", 0, 2 * time.Second, []string{"suspect"}},
		{"counters advance, reads slow", 20 * time.Minute, 2 * time.Second, []string{"suspect", "unsuspect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				t0 := time.Now()
				s := NewSuspicion(0)
				h := &hostLog{end: t0.Add(30 * time.Minute), readDelay: tc.readDelay}
				if tc.advance > 0 {
					h.advanceAt = t0.Add(tc.advance)
				}
				// One call answered first: an engine's silence is judged
				// only once it has answered through the watch.
				s.Sent(0, t0.Add(-time.Second), 100, 1, true)
				s.Chunk(0, t0.Add(-500*time.Millisecond))
				s.Done(0, t0.Add(-500*time.Millisecond), true, 1)
				s.Sent(1, t0, 100, 50, true)
				s.Run(h)
				// A silent call suspected again after the progress is
				// right: only the first events are the case's.
				if len(h.events) < len(tc.want) {
					t.Fatalf("events %v, want %v first", h.events, tc.want)
				}
				for i := range tc.want {
					if h.events[i] != tc.want[i] {
						t.Fatalf("events %v, want %v first", h.events, tc.want)
					}
				}
				if h.reads == 0 {
					t.Fatal("the quiet engine's counters were never read")
				}
				if tc.advance == 0 && (len(h.events) != 1 || !s.Suspected()) {
					t.Fatalf("a silent engine's suspicion cleared: %v", h.events)
				}
				// As soon as with reads that answer at once (1.6 s here).
				if late := h.suspectedAt.Sub(t0); late > 1700*time.Millisecond {
					t.Errorf("suspected %v after the call was sent, want within 1.7 s, as with a read that answers at once", late)
				}
			})
		})
	}
	t0 := time.Unix(1e9, 0)
	var off *Suspicion
	off.Sent(1, t0, 1, 1, true)
	off.Chunk(1, t0)
	off.Done(1, t0, true, 1)
	if off.Suspected() || off.Confirmed(t0) {
		t.Fatal("an off Suspicion suspected")
	}
}
