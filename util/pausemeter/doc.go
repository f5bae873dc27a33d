// Package pausemeter measures the time vigil itself was not running: the
// process descheduled on a starved CPU, stopped, or slowed by its own
// garbage collection. A silence of the engine's that falls in such a
// pause is vigil's, not the engine's: the stall watch
// (admission/engineloss) discounts it before it judges an engine overdue.
//
// The measure is a tick every few milliseconds that notes how late it
// fired: lateness past a small tolerance is time the process did not run
// when it was due to. A bounded ring keeps the recent pauses, and Paused
// answers how much of an interval they cover, counting a tick late at
// the moment asked as a pause under way (the meter's own goroutine may
// not have run yet after the process resumes). A pause that falls between
// two ticks shows short by up to an interval: the meter errs towards
// discounting too little, which leaves the watch as it would be without
// it.
package pausemeter
