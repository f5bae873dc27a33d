// Package overrides applies temporary changes to vigil's live settings
// (e.g. lifting admission.max_in_flight) and reverts each at its expiry,
// even across vigil's own restarts, paging before and at expiry.
//
// The incident behind vigil was a limit lifted "for testing" with no
// expiry, found three weeks later. So every override carries an until and
// a reason, the value it replaced is journaled before the change is made,
// and a job run every minute by cron restores it. The manager knows the
// settings only by key, through an Applier, and tells humans through a
// Notifier; Tick does all the scheduled work so tests drive it with an
// injected clock.
package overrides
