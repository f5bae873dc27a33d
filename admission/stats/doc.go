// Package stats is what the admission limiter reports of itself: Stats, a
// snapshot of its counts and state, and the Prometheus collector that
// exposes a snapshot as the vigil_admission_* metrics at scrape time.
// It only reads: package admission fills Stats from its counters and
// package core's, and nothing here decides anything.
package stats
