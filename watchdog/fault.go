package watchdog

import "time"

// faultReminder is how often a fault that goes on is logged again: once
// when it begins, then a reminder with a count, so a state directory gone
// read-only is a line every few minutes, not one every cycle.
const faultReminder = 10 * time.Minute

// fault follows one repeated failure (a state file that cannot be
// written) for the log: when it began, how many times it happened, and
// when it was last told.
type fault struct {
	since, told time.Time
	n           int
}

type faultNews int

const (
	faultQuiet  faultNews = iota // nothing to log
	faultBegan                   // the first failure: log it as an error
	faultGoesOn                  // still failing, a reminder is due
	faultEnded                   // it works again
)

// note takes one attempt's outcome and says what, if anything, to log.
func (f *fault) note(err error, now time.Time) faultNews {
	switch {
	case err == nil && f.n == 0:
		return faultQuiet
	case err == nil:
		*f = fault{}
		return faultEnded
	case f.n == 0:
		*f = fault{since: now, told: now, n: 1}
		return faultBegan
	}
	f.n++
	if now.Sub(f.told) >= faultReminder {
		f.told = now
		return faultGoesOn
	}
	return faultQuiet
}
