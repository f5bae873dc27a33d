package admission

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// jumpClock is the wall clock plus a skew the test adds at once: to the
// limiter, time jumped as it does for a process stopped for that long (a
// starved host), and its pause meter's next tick reads that late.
type jumpClock struct{ skew atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *jumpClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
func (c *jumpClock) jump(d time.Duration) { c.skew.Add(int64(d)) }

// A stream under way, and 1.5 s of silence: vigil's own pause (the clock
// jumps, the engine's next bytes come 300 ms of wall time later, read
// as a pause's backlog would be) raises no suspicion; the engine's stall
// of the same length still does. Before the pause meter, the pause was
// suspected as a stall (the silence past the 1 s floor).
func TestVigilsOwnPauseRaisesNoSuspicion(t *testing.T) {
	t.Parallel()
	for _, paused := range []bool{true, false} {
		name := "vigil paused"
		if !paused {
			name = "the engine stalled"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			re := newRestartableEngine(t, 0)
			clk := &jumpClock{}
			p := startProxy(t, testConfig(), re.url, WithClock(clk))
			c := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			streamDone := startLongStream(ctx, t, c, p.url, re)
			e := re.cur.Load()
			e.Hang()
			if paused {
				clk.jump(1500 * time.Millisecond)
				time.Sleep(300 * time.Millisecond) // the stall watch checks every 100 ms meanwhile
				e.Clear()
			} else {
				start := time.Now()
				eventually(t, 3*time.Second, "the stall suspected", p.l.Suspected)
				if d := time.Since(start); d < 900*time.Millisecond {
					t.Errorf("suspected %v into the stall, want the 1 s floor", d)
				}
				e.Clear()
			}
			streamDone()
			s := p.l.Stats()
			switch {
			case paused && s.Suspicions != 0:
				t.Errorf("%d suspicions for vigil's own pause (measured %v)", s.Suspicions, s.Paused)
			case paused && (s.Paused < 1400*time.Millisecond || s.Paused > 1600*time.Millisecond):
				t.Errorf("the meter measured %v of pause, want about 1.5 s", s.Paused)
			case !paused && s.Suspicions != 1:
				t.Errorf("%d suspicions for the engine's stall, want 1", s.Suspicions)
			}
		})
	}
}
