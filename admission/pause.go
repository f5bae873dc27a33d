package admission

import (
	"github.com/vigil-dev/vigil/util/pausemeter"
)

// vigil's own pauses (package pausemeter): on a starved host the whole
// process stops for tens to hundreds of milliseconds, and what the
// engine sent meanwhile is read only when it runs again. The stall watch
// discounts that time from the engine's silence: it was vigil's.

// scaler is a Clock that runs Scale times faster than the wall (a
// time-scaled engine's, bench/): the pause meter ticks on wall time, so
// it waits Scale times longer on it.
type scaler interface{ Scale() float64 }

// WithPauses shares the process's pause meter, started and closed by the
// caller and running on the limiter's clock (the daemon's one meter, read
// by the watchdog too): a limiter without it starts its own.
func WithPauses(m *pausemeter.Meter) Option {
	return func(l *Limiter) { l.pauses, l.sharedPauses = m, m != nil }
}

// startPauses starts the pause meter on the limiter's clock (unless the
// caller shares one) and tells the stall watch of it.
func (l *Limiter) startPauses() {
	if l.sharedPauses {
		l.sus.DiscountPauses(l.pauses.Paused)
		return
	}
	cfg := pausemeter.Config{}
	if s, ok := l.clock.(scaler); ok {
		cfg.Scale = s.Scale()
	}
	l.pauses = pausemeter.New(l.clock, cfg)
	l.pauses.Start()
	l.sus.DiscountPauses(l.pauses.Paused)
}
