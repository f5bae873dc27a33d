// Package fakeclock is a hand-driven clock for tests of code that takes a
// clock with Now and AfterFunc (admission/core.Clock): time moves only
// when the test calls Advance, so queue timers and rate windows are
// exact and a test never sleeps.
package fakeclock

import (
	"sort"
	"sync"
	"time"
)

// Clock is a hand-driven clock: Now stands still until Advance, which
// runs the timers that came due, in order.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

// New is a Clock at a fixed instant (2023-11-14 22:13:20 UTC).
func New() *Clock { return &Clock{now: time.Unix(1_700_000_000, 0)} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc runs f (on the goroutine that calls Advance) once d has
// passed; stop reports whether it prevented that.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{at: c.now.Add(d), f: f}
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
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*timer
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
