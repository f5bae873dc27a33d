// Package stats is what the admission limiter reports of itself: Stats, a
// snapshot of its counts and state, and the Prometheus collector that
// exposes a snapshot as the vigil_admission_* metrics at scrape time.
// It only reads: package admission fills Stats from its own counters,
// SetCore from package core's snapshot; nothing here decides anything.
package stats
