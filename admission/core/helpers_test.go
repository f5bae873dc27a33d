package core

import (
	"sort"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// pollEvery is how often package admission reads the engine's gauges
// while requests are in flight.
const pollEvery = 250 * time.Millisecond

// testConfig is the default config with a fixed small cap and timeouts
// short enough for unit tests (as package admission's tests use).
func testConfig() configs.Admission {
	c := configs.Default().Admission
	c.MaxInFlight = 4
	c.MaxQueue = 8
	c.MaxQueueWait = 2 * time.Second
	c.CancelAfter = 300 * time.Millisecond
	c.SlowStart = 0
	return c
}

// fakeClock is a hand-driven Clock.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !tm.stopped
		tm.stopped = true
		return was
	}
}

// Advance moves time on and runs the timers that came due, in order.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, tm := range c.timers {
		switch {
		case tm.stopped:
		case !tm.at.After(c.now):
			tm.stopped = true
			due = append(due, tm)
		default:
			keep = append(keep, tm)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, tm := range due {
		tm.f()
	}
}

// observeEngine feeds a reading of the queue gauges alone, as most tests
// of the automatic cap need.
func (a *autoLimit) observeEngine(waiting, running float64, now time.Time) bool {
	return a.observeLoad(QueueOnly(waiting, running), now)
}
