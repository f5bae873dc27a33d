package testinfra

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test with what once
// within has passed: the one wait-until of vigil's tests (an event that
// another goroutine, a server or a real HAProxy brings about soon).
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for poll := time.Millisecond; !cond(); poll = min(2*poll, 20*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(poll)
	}
}
