package watchdog

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-dev/vigil/configs"
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

// Through the loop (Options.Paused, as the daemon wires its pause meter):
// counters frozen for 3m30s of which vigil was paused two minutes are
// never HUNG and ask no recovery; the engine frozen for six minutes with
// the same pause is HUNG, later than without the pause by at most the
// pause, and recovered once.
func TestTheLoopJudgesTheStallNetOfVigilsPauses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frozen time.Duration
		hung   bool
	}{
		{name: "frozen 3m30s, paused 2m of it", frozen: 3*time.Minute + 30*time.Second},
		{name: "frozen 6m, paused 2m of it", frozen: 6 * time.Minute, hung: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var (
					mu    sync.Mutex
					pause [2]time.Time
				)
				r := newRig(t, nil, func(o *Options) {
					o.Paused = func(a, b time.Time) time.Duration {
						mu.Lock()
						defer mu.Unlock()
						return pausedOver(pause)(a, b)
					}
				})
				r.engine.set(func(f *fakeEngine) { f.waiting, f.running, f.tokensPerSec = 40, 8, 900 })
				r.start()
				time.Sleep(5 * time.Minute)
				frozeAt := time.Now()
				mu.Lock()
				pause = [2]time.Time{frozeAt.Add(30 * time.Second), frozeAt.Add(150 * time.Second)}
				mu.Unlock()
				r.engine.set(func(f *fakeEngine) { f.mode = "hung" })
				time.Sleep(tc.frozen)
				r.engine.set(func(f *fakeEngine) { f.mode = "serving" })
				time.Sleep(time.Minute)
				r.stop()

				at := r.firstAt(StateHung)
				if !tc.hung {
					if !at.IsZero() || r.rec.count() != 0 {
						t.Fatalf("HUNG at %s (%d recoveries) on a stall of vigil's own pause", at.Sub(frozeAt), r.rec.count())
					}
					for _, p := range r.pager.all() {
						if strings.Contains(p.v.Reason, "of which vigil was paused 2m00s") {
							return
						}
					}
					t.Fatal("no verdict said how much of the stall vigil was paused")
				}
				cfg := configs.Default().Watchdog
				hangAfter := 3 * time.Minute
				if at.IsZero() || r.rec.count() != 1 {
					t.Fatalf("the hang was never recovered (HUNG at %v, %d recoveries)", at, r.rec.count())
				}
				if took := at.Sub(frozeAt); took < hangAfter+2*time.Minute || took > hangAfter+2*time.Minute+2*cfg.Interval {
					t.Fatalf("HUNG %s after the freeze, want hang_after + the 2m pause, within 2 intervals", took)
				}
				for _, p := range r.pager.all() {
					if p.v.State == StateHung && !strings.Contains(p.v.Reason, "of which vigil was paused 2m00s") {
						t.Fatalf("HUNG without the pause in its reason: %s", p.v.Reason)
					}
				}
			})
		})
	}
}
