package watchdog

import (
	"strings"
	"testing"
	"time"
)

// pausedOver is a pause meter's Paused that measured the pauses spans
// (each from, to).
func pausedOver(spans ...[2]time.Time) func(a, b time.Time) time.Duration {
	return func(a, b time.Time) time.Duration {
		var d time.Duration
		for _, s := range spans {
			from, to := latest(s[0], a), s[1]
			if b.Before(to) {
				to = b
			}
			if to.After(from) {
				d += to.Sub(from)
			}
		}
		return d
	}
}

// A stall is judged net of vigil's own pauses: the silence vigil caused
// by not running (GC, a noisy neighbour, a CPU-starved host) is never a
// hang of the engine's, and the restart HUNG brings must not come from it.
// The same frozen window with the engine frozen past hang_after net of the
// pause is still HUNG.
func TestAStallMadeOfVigilsOwnPauseIsNeverHung(t *testing.T) {
	t.Parallel()
	// busy serves, then freezes the counters for frozen ticks with 40
	// waiting and 8 running; freeze is when the counters last moved.
	busy := func(frozen int) (s *sim, freeze time.Time) {
		s = newSim().work(40, 8).probeOK(2*time.Second).tick(8, func(s *sim) { s.serve(30000, 20) })
		freeze = s.at
		return s.tick(frozen, keepProbeOutstanding(90*time.Second)), freeze
	}
	minute := func(freeze time.Time) func(a, b time.Time) time.Duration {
		return pausedOver([2]time.Time{freeze.Add(30 * time.Second), freeze.Add(90 * time.Second)})
	}
	for _, tc := range []struct {
		name    string
		frozen  int // ticks of 15 s frozen after the last move (hang_after 3m)
		paused  func(freeze time.Time) func(a, b time.Time) time.Duration
		want    State
		never   []State
		reason  string
		stalled time.Duration // net of the pause
		pause   time.Duration
	}{
		{
			name: "no pause meter: 3m15s frozen is hung", frozen: 13,
			want:    StateHung,
			reason:  "HUNG: no progress for 3m15s with 40 waiting, 8 running;",
			stalled: 3*time.Minute + 15*time.Second,
		},
		{
			name: "3m15s frozen of which vigil was paused a minute is not hung", frozen: 13, paused: minute,
			want: StateUnknown, never: []State{StateHung},
			reason:  "UNKNOWN: no progress for 3m15s, of which vigil was paused 1m00s, with 40 waiting, 8 running (hung at 3m00s)",
			stalled: 2*time.Minute + 15*time.Second, pause: time.Minute,
		},
		{
			name: "the engine frozen past hang_after net of the pause is hung", frozen: 17, paused: minute,
			want:    StateHung,
			reason:  "HUNG: no progress for 4m15s, of which vigil was paused 1m00s, with 40 waiting, 8 running;",
			stalled: 3*time.Minute + 15*time.Second, pause: time.Minute,
		},
		{
			name: "a pause while the counters moved takes nothing off the stall", frozen: 13,
			paused: func(freeze time.Time) func(a, b time.Time) time.Duration {
				return pausedOver([2]time.Time{freeze.Add(-90 * time.Second), freeze})
			},
			want:    StateHung,
			reason:  "HUNG: no progress for 3m15s with 40 waiting, 8 running;",
			stalled: 3*time.Minute + 15*time.Second,
		},
		{
			name: "a pause under the meter's tick is not named", frozen: 13,
			paused: func(freeze time.Time) func(a, b time.Time) time.Duration {
				return pausedOver([2]time.Time{freeze.Add(time.Minute), freeze.Add(time.Minute + 5*time.Millisecond)})
			},
			want:    StateHung,
			reason:  "HUNG: no progress for 3m15s with 40 waiting, 8 running;",
			stalled: 3*time.Minute + 15*time.Second - 5*time.Millisecond, pause: 5 * time.Millisecond,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, freeze := busy(tc.frozen)
			p := defaultParams()
			if tc.paused != nil {
				p.Paused = tc.paused(freeze)
			}
			v := classifyEach(t, s, p, tc.never)
			if v.State != tc.want {
				t.Fatalf("state %s, want %s: %s", v.State, tc.want, v.Reason)
			}
			if !strings.HasPrefix(v.Reason, tc.reason) {
				t.Errorf("reason %q\nwant it to begin %q", v.Reason, tc.reason)
			}
			if v.Evidence.Stalled != tc.stalled || v.Evidence.Paused != tc.pause {
				t.Errorf("evidence stalled %s, paused %s; want %s, %s", v.Evidence.Stalled, v.Evidence.Paused, tc.stalled, tc.pause)
			}
		})
	}
}
