package core

import "time"

// Clock is the limiter's time source: queue ages, rate windows, the
// deferred-cancellation and queue-wait timers all read it, so the limiter
// can keep a time-scaled engine's time (bench/). Tests need none of it:
// a testing/synctest bubble fakes the wall clock itself.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has passed. The returned
	// stop reports whether it prevented f from running.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// WallClock is the real time source, the default of New.
var WallClock Clock = realClock{}
