package core

import (
	"testing/synctest"
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

// advance lets d pass on the clock of the test's bubble (testing/synctest)
// and returns once every goroutine it woke is blocked again: the timers
// that came due have run.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// observeEngine feeds a reading of the queue gauges alone, as most tests
// of the automatic cap need.
func (a *autoLimit) observeEngine(waiting, running float64, now time.Time) bool {
	return a.observeLoad(QueueOnly(waiting, running), now)
}
