package faultlog

import (
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/util/humanize"
)

// DefaultEvery is how often a fault that goes on is logged again.
const DefaultEvery = 10 * time.Minute

// Fault is one kind of fault that can repeat. The zero value is ready to
// use with time.Now and DefaultEvery. It is safe for concurrent use.
type Fault struct {
	// Every is the reminder interval (DefaultEvery if zero).
	Every time.Duration
	// Now is the clock (time.Now if nil).
	Now func() time.Time

	mu       sync.Mutex
	since    time.Time // first failure of the current run; zero while fine
	told     time.Time // last line logged about it
	failures int       // failures since since
	untold   int       // failures since told
}

// Failed records one failure. The first of a run is logged at level with
// msg; later ones only every Every, at the same level, with how many
// attempts failed since the fault began and since the last line.
func (f *Fault) Failed(l *logrus.Entry, level logrus.Level, err error, msg string) {
	now := f.now()
	f.mu.Lock()
	first := f.since.IsZero()
	if first {
		f.since, f.failures, f.untold = now, 0, 0
	}
	f.failures++
	f.untold++
	remind := !first && now.Sub(f.told) >= f.every()
	n, since, untold := f.failures, f.since, f.untold
	if first || remind {
		f.told, f.untold = now, 0
	}
	f.mu.Unlock()
	switch {
	case first:
		l.WithError(err).Log(level, msg)
	case remind:
		l.WithError(err).WithFields(logrus.Fields{"failures": n, "since": humanize.StampUTC(since)}).
			Logf(level, "%s (still failing: %d attempts in %s, %d since the last line)", msg, n, humanize.Rough(now.Sub(since)), untold)
	}
}

// OK records a success. If a fault was going on, msg is logged once at
// info with how long it lasted and how many attempts failed.
func (f *Fault) OK(l *logrus.Entry, msg string) {
	now := f.now()
	f.mu.Lock()
	since, n := f.since, f.failures
	f.since, f.failures, f.untold = time.Time{}, 0, 0
	f.mu.Unlock()
	if since.IsZero() {
		return
	}
	l.WithField("failures", n).Infof("%s (after %d failed attempts over %s)", msg, n, humanize.Rough(now.Sub(since)))
}

func (f *Fault) now() time.Time {
	if f.Now == nil {
		return time.Now()
	}
	return f.Now()
}

func (f *Fault) every() time.Duration {
	if f.Every <= 0 {
		return DefaultEvery
	}
	return f.Every
}
