// Package faultlog logs a fault that repeats (a state file that cannot be
// written, every cycle) as a person wants to read it: once when it
// begins, then a reminder with a count at a fixed interval, and once when
// it clears, instead of one line per failed attempt.
package faultlog
