package engineloss

import (
	"testing"
	"time"
)

// hostLog is a Host on a scripted clock: each Sleep advances it, the
// engine's counters advance from advanceAt on, and the run stops at end.
type hostLog struct {
	now, end, advanceAt time.Time
	reads               int
	events              []string
}

func (h *hostLog) Now() time.Time { return h.now }
func (h *hostLog) Sleep(d time.Duration) bool {
	h.now = h.now.Add(d)
	return h.now.Before(h.end)
}
func (h *hostLog) Recovering() bool { return false }
func (h *hostLog) ReadCounters() (Counters, bool) {
	h.reads++
	if !h.advanceAt.IsZero() && !h.now.Before(h.advanceAt) {
		return Counters{PromptTokens: 200, FirstTokens: 2}, true
	}
	return Counters{PromptTokens: 100, FirstTokens: 1}, true
}
func (h *hostLog) Suspect(time.Time, Evidence) { h.events = append(h.events, "suspect") }
func (h *hostLog) Unsuspect()                  { h.events = append(h.events, "unsuspect") }

// TestSuspicionRun: a call the engine never answers is suspected; the
// engine's counters advancing past the quiet spell's first read clear the
// suspicion (progress the bytes did not show); an off Suspicion notes
// nothing and never suspects.
func TestSuspicionRun(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	for _, tc := range []struct {
		name    string
		advance time.Duration // when the counters advance (0: never)
		want    []string
	}{
		{"silent engine", 0, []string{"suspect"}}, // and never cleared
		{"counters advance", 20 * time.Minute, []string{"suspect", "unsuspect"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSuspicion(0)
			h := &hostLog{now: t0, end: t0.Add(30 * time.Minute)}
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
			// A silent call suspected again after the progress is right:
			// only the first events are the case's.
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
		})
	}
	var off *Suspicion
	off.Sent(1, t0, 1, 1, true)
	off.Chunk(1, t0)
	off.Done(1, t0, true, 1)
	if off.Suspected() || off.Confirmed(t0) {
		t.Fatal("an off Suspicion suspected")
	}
}
