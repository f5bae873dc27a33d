package core

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// fakeClock is a clock a test sets.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	return WallClock.AfterFunc(d, f)
}

// Issue 41: vigil's restart reset what the limiter learned: the cap, the
// engine's pace, the clients' timeouts and patience per route. Taken by
// Learned, kept as JSON (the state file), a new limiter starts from them
// while they are younger than LearnedMaxAge.
func TestWhatWasLearnedSurvivesARestart(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cfg := configs.Default().Admission
	cfg.TTFTTarget = configs.Automatic()
	learn := func() Learned {
		clk := &fakeClock{now: t0}
		l := New(cfg, WithClock(clk))
		a := l.auto.(*autoLimit)
		a.limit, a.probing = 61, false
		a.start.seats = 64
		a.gate.turn = 0.3
		l.engineTTFT, l.engineService = 400*time.Millisecond, 2*time.Second
		for _, d := range []time.Duration{6, 6, 7, 6} {
			l.GaveUp("/v1/chat/completions", d*time.Second)
		}
		l.deadlines.comebacksOf("/v1/completions").patient = true
		return l.Learned()
	}
	k := learn()
	raw, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		age     time.Duration
		restore bool
	}{
		{"a minute later: restored", time.Minute, true},
		{"past LearnedMaxAge: distrusted", LearnedMaxAge + time.Minute, false},
		{"from the future (a clock that jumped): distrusted", -time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var back Learned
			if err := json.Unmarshal(raw, &back); err != nil {
				t.Fatal(err)
			}
			l := New(cfg, WithClock(&fakeClock{now: t0.Add(tc.age)}))
			if got := l.Restore(back); got != tc.restore {
				t.Fatalf("Restore = %v, want %v", got, tc.restore)
			}
			s := l.Stats()
			if !tc.restore {
				if s.Cap != autoInitial || len(s.LearnedTimeouts) > 0 || len(s.PatientRoutes) > 0 {
					t.Errorf("distrusted state used: cap %d, timeouts %v, patient %v", s.Cap, s.LearnedTimeouts, s.PatientRoutes)
				}
				return
			}
			if s.Cap != 61 {
				t.Errorf("cap %d after the restart, want the 61 learned", s.Cap)
			}
			if got := s.LearnedTimeouts["/v1/chat/completions"]; got != 6*time.Second {
				t.Errorf("learned timeout %v, want 6s", got)
			}
			if len(s.PatientRoutes) != 1 || s.PatientRoutes[0] != "/v1/completions" {
				t.Errorf("patient routes %v, want [/v1/completions]", s.PatientRoutes)
			}
			if s.TTFTObjective != AutoObjective(300*time.Millisecond) {
				t.Errorf("objective %v, want the one of the learned 300ms prefill", s.TTFTObjective)
			}
			l.mu.Lock()
			pace, seats := l.engineService, l.auto.(*autoLimit).start.seats
			l.mu.Unlock()
			if pace != 2*time.Second || seats != 64 {
				t.Errorf("service %v, seats %d; want 2s, 64", pace, seats)
			}
		})
	}
	t.Run("a cap still probing is not kept", func(t *testing.T) {
		l := New(cfg)
		if k := l.Learned(); k.Cap != 0 || !k.Empty() {
			t.Errorf("a fresh limiter learned %+v, want nothing", k)
		}
	})
}
