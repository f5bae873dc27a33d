package pausemeter

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// idleClock never fires: the table drives the ticks itself.
type idleClock struct{}

func (idleClock) Now() time.Time                              { return t0 }
func (idleClock) AfterFunc(time.Duration, func()) func() bool { return func() bool { return true } }

// The meter's arithmetic, ticks given: a tick later than the interval
// and the tolerance is a pause, from the tolerance's end to the tick;
// Paused sums the pauses' parts in the interval asked, and a tick late
// at the moment asked is a pause under way.
func TestPaused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   Config
		ticks []int // ms from t0
		a, b  int   // the interval asked, ms from t0
		open  bool  // the meter is running (a late tick is a pause under way)
		want  time.Duration
	}{
		{name: "ticks on time", ticks: []int{0, 10, 20, 30, 40}, a: 0, b: 40, want: 0},
		{name: "late within the tolerance", ticks: []int{0, 14, 28, 42}, a: 0, b: 42, want: 0},
		{name: "one pause", ticks: []int{0, 10, 315, 325}, a: 0, b: 325, want: ms(315 - 25)},
		{name: "a pause cut by the interval's start", ticks: []int{0, 10, 315, 325}, a: 100, b: 325, want: ms(215)},
		{name: "a pause cut by the interval's end", ticks: []int{0, 10, 315, 325}, a: 0, b: 125, want: ms(100)},
		{name: "a pause before the interval", ticks: []int{0, 10, 315, 325}, a: 320, b: 400, want: 0},
		{name: "two pauses", ticks: []int{0, 115, 125, 230}, a: 0, b: 230, want: ms(100 + 90)},
		{name: "the interval reversed", ticks: []int{0, 10, 315}, a: 315, b: 0, want: 0},
		{name: "a pause under way", ticks: []int{0, 10}, a: 0, b: 400, open: true, want: ms(400 - 25)},
		{name: "no pause under way once closed", ticks: []int{0, 10}, a: 0, b: 400, want: 0},
		{name: "a tick not yet late", ticks: []int{0, 10}, a: 0, b: 24, open: true, want: 0},
		{name: "the ring forgets the oldest", cfg: Config{Spans: 2}, ticks: []int{0, 100, 200, 300}, a: 0, b: 300,
			want: ms(2 * 85)},
		// A time-scaled clock (engine time = wall x 20): the interval and
		// the tolerance are wall time, 200 ms and 100 ms of the clock's.
		{name: "scaled: on time", cfg: Config{Scale: 20}, ticks: []int{0, 200, 400, 590}, a: 0, b: 590, want: 0},
		{name: "scaled: a pause", cfg: Config{Scale: 20}, ticks: []int{0, 200, 4200}, a: 0, b: 4200, want: ms(4200 - 500)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := New(idleClock{}, tc.cfg)
			for _, at := range tc.ticks {
				m.note(t0.Add(ms(at)))
			}
			m.running = tc.open
			if got := m.Paused(t0.Add(ms(tc.a)), t0.Add(ms(tc.b))); got != tc.want {
				t.Fatalf("Paused(%d, %d ms) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
	var off *Meter
	if off.Paused(t0, t0.Add(time.Hour)) != 0 {
		t.Fatal("a nil meter measured a pause")
	}
}

// skewClock is the wall clock (synctest's) plus a skew the test adds: a
// tick that fires on time reads as late by the skew added since the last,
// as it would after the process was paused.
type skewClock struct {
	mu   sync.Mutex
	skew time.Duration
}

func (c *skewClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.skew)
}
func (c *skewClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}
func (c *skewClock) pause(d time.Duration) {
	c.mu.Lock()
	c.skew += d
	c.mu.Unlock()
}

// The meter's own ticking: on time it measures nothing; a pause of the
// process (its clock jumping between two ticks) is measured, less the
// tolerance, once its tick comes, and counted as under way before.
func TestMeterTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &skewClock{}
		m := New(c, Config{})
		start := c.Now()
		m.Start()
		defer m.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		if p := m.Paused(start, c.Now()); p != 0 {
			t.Fatalf("measured %v of pause on time", p)
		}
		// The process stops for 300 ms just after a tick: the next one
		// reads 300 ms late. Until it runs, the pause is under way.
		time.Sleep(ms(1))
		c.pause(ms(300))
		if p := m.Paused(start, c.Now()); p != ms(301)-DefaultTolerance-DefaultInterval {
			t.Fatalf("a pause under way measured %v", p)
		}
		time.Sleep(ms(9))
		synctest.Wait()
		want := ms(300) - DefaultTolerance
		if p := m.Paused(start, c.Now()); p != want {
			t.Fatalf("measured %v of a 300 ms pause, want %v", p, want)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if p, tot := m.Paused(start, c.Now()), m.Total(); p != want || tot != want {
			t.Fatalf("measured %v (total %v) after a second more on time, want %v", p, tot, want)
		}
	})
}
