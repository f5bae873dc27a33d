package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	p := Policy{Min: 30 * time.Second, Max: 10 * time.Minute}
	cases := []struct {
		attempt  int
		rand     float64
		want     time.Duration
		ceilWant time.Duration
	}{
		{1, 0, 15 * time.Second, 30 * time.Second},
		{1, 0.999999, 30 * time.Second, 30 * time.Second},
		{2, 0.5, 45 * time.Second, time.Minute},
		{3, 0, time.Minute, 2 * time.Minute},
		{10, 0, 5 * time.Minute, 10 * time.Minute},
		{10, 0.999999, 10 * time.Minute, 10 * time.Minute},
	}
	for _, c := range cases {
		p.Rand = func() float64 { return c.rand }
		got := p.Delay(c.attempt).Round(time.Second)
		if got != c.want || p.Ceiling(c.attempt) != c.ceilWant {
			t.Errorf("attempt %d rand %v: delay %s ceiling %s, want %s and %s", c.attempt, c.rand, got, p.Ceiling(c.attempt), c.want, c.ceilWant)
		}
	}
}

// Two vigils that failed at the same moment do not retry in lockstep.
func TestDelaysSpread(t *testing.T) {
	t.Parallel()
	p := Policy{Min: time.Second, Max: time.Minute}
	seen := map[time.Duration]bool{}
	for range 50 {
		d := p.Delay(3)
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("delay %s outside [2s, 4s]", d)
		}
		seen[d.Round(10*time.Millisecond)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 delays took only %d values: no jitter", len(seen))
	}
}
