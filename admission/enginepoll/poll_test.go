package enginepoll

import (
	"testing"
	"time"
)

// A failed read of the engine's metrics costs a second of readings, not
// ten: the pauses double from one second up to pollRetry.
func TestRetryAfterAFailedEngineRead(t *testing.T) {
	for n, want := range map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: pollRetry, 50: pollRetry,
	} {
		if got := retryAfter(n); got != want {
			t.Errorf("retryAfter(%d) = %s, want %s", n, got, want)
		}
	}
}
