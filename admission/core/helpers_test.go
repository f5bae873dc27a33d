package core

import (
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/fakeclock"
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

// fakeClock is a hand-driven Clock (internal/fakeclock).
type fakeClock = fakeclock.Clock

func newFakeClock() *fakeClock { return fakeclock.New() }

// observeEngine feeds a reading of the queue gauges alone, as most tests
// of the automatic cap need.
func (a *autoLimit) observeEngine(waiting, running float64, now time.Time) bool {
	return a.observeLoad(QueueOnly(waiting, running), now)
}
