// Package scenario holds the watchdog's end-to-end tests: the real
// watchdog, with its real probes, against the simulated engine over HTTP,
// time-scaled, one fault per scenario. It has no code of its own.
package scenario
