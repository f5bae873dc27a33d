package pausemeter

import (
	"cmp"
	"sync"
	"time"
)

const (
	// DefaultInterval is the wall time between ticks: short against the
	// pauses that matter (tens to hundreds of milliseconds), long enough
	// to cost nothing (a hundred wakeups a second).
	DefaultInterval = 10 * time.Millisecond
	// DefaultTolerance is the lateness of a tick taken for the timer's
	// own slack on a busy host, not a pause.
	DefaultTolerance = 5 * time.Millisecond
	// DefaultSpans is how many pauses the ring keeps: a minute of a pause
	// every tick and a half, far more on any host that runs at all.
	DefaultSpans = 4096
)

// Clock is the time the meter stamps its ticks with and waits on: the
// time of whoever asks Paused (the limiter's clock; a time-scaled
// engine's in bench/).
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has passed; stop
	// reports whether it prevented f from running.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Wall is the wall clock: the daemon's one meter runs on it.
var Wall Clock = wall{}

type wall struct{}

func (wall) Now() time.Time { return time.Now() }

func (wall) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// Config is a meter's ticking. Interval and Tolerance are wall time.
type Config struct {
	Interval  time.Duration // between ticks (0: DefaultInterval)
	Tolerance time.Duration // lateness not counted (0: DefaultTolerance)
	Spans     int           // pauses kept (0: DefaultSpans)
	// Scale is the clock's time per wall time: a time-scaled engine's
	// clock runs Scale times faster than the wall (0: 1), so the meter
	// waits Interval x Scale on it to tick every Interval of wall time,
	// and its pauses are Scale times longer in its time.
	Scale float64
}

// span is one pause: the clock's time from, to.
type span struct{ from, to time.Time }

// Meter measures vigil's own pauses. Start it, Close it; Paused is safe
// for concurrent use.
type Meter struct {
	clock     Clock
	interval  time.Duration // in the clock's time
	tolerance time.Duration // in the clock's time

	mu      sync.Mutex
	last    time.Time // the last tick (zero: none yet)
	running bool      // started and not closed: a tick is due
	stop    func() bool
	ring    []span // ring[(head-n+i) mod len]: the i-th oldest of n
	head, n int
	total   time.Duration // all pauses counted
}

// New is a meter on c, not yet ticking.
func New(c Clock, cfg Config) *Meter {
	scale := cfg.Scale
	if scale <= 0 {
		scale = 1
	}
	return &Meter{
		clock:     c,
		interval:  time.Duration(float64(cmp.Or(cfg.Interval, DefaultInterval)) * scale),
		tolerance: time.Duration(float64(cmp.Or(cfg.Tolerance, DefaultTolerance)) * scale),
		ring:      make([]span, cmp.Or(cfg.Spans, DefaultSpans)),
	}
}

// Start begins ticking.
func (m *Meter) Start() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		return
	}
	m.running = true
	m.tickLocked(m.clock.Now())
}

// Close stops ticking; the pauses measured stay.
func (m *Meter) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.running = false
	if m.stop != nil {
		m.stop()
	}
}

// tick is one tick, at now.
func (m *Meter) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running {
		m.tickLocked(m.clock.Now())
	}
}

// tickLocked notes a tick at now (the pause before it, if it was late)
// and schedules the next.
func (m *Meter) tickLocked(now time.Time) {
	m.note(now)
	m.stop = m.clock.AfterFunc(m.interval, m.tick)
}

// note records a tick at now: the time it was late by past the tolerance
// is a pause, up to now.
func (m *Meter) note(now time.Time) {
	if !m.last.IsZero() {
		if from := m.last.Add(m.interval + m.tolerance); now.After(from) {
			m.ring[m.head] = span{from, now}
			m.head = (m.head + 1) % len(m.ring)
			m.n = min(m.n+1, len(m.ring))
			m.total += now.Sub(from)
		}
	}
	if now.After(m.last) {
		m.last = now
	}
}

// Paused is how much of [a, b] (the clock's time) vigil was not running:
// the pauses measured in it, and the one under way at b if the meter's
// tick is late then. Pauses older than the ring are forgotten.
func (m *Meter) Paused(a, b time.Time) time.Duration {
	if m == nil || !b.After(a) {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	if m.running && !m.last.IsZero() {
		d += overlap(span{m.last.Add(m.interval + m.tolerance), b}, a, b)
	}
	for i := 1; i <= m.n; i++ {
		s := m.ring[(m.head-i+len(m.ring))%len(m.ring)]
		if !s.to.After(a) {
			break // the rest are older
		}
		d += overlap(s, a, b)
	}
	return d
}

// Total is every pause measured since the meter started.
func (m *Meter) Total() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.total
}

// overlap is how much of s falls in [a, b].
func overlap(s span, a, b time.Time) time.Duration {
	from, to := s.from, s.to
	if a.After(from) {
		from = a
	}
	if b.Before(to) {
		to = b
	}
	if !to.After(from) {
		return 0
	}
	return to.Sub(from)
}
