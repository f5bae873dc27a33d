package core

import (
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

func TestRetryAfterCountsTheCallsServedFirst(t *testing.T) {
	// The queue, oldest first: a held place, a retry, a first attempt, the
	// waiter asking, a retry, a first attempt.
	kinds := []string{"held", "retry", "first", "me", "retry", "first"}
	for _, tc := range []struct {
		order string
		want  int
	}{
		// Every entry in front of it.
		{"fifo", 3},
		// Every first attempt (2), and the retries and held places in front (2).
		{"newest_first", 4},
	} {
		t.Run(tc.order, func(t *testing.T) {
			l := &Limiter{cfg: configs.Admission{Order: tc.order}}
			var me *waiter
			for _, k := range kinds {
				w := &waiter{queued: true, placeholder: k == "held", retry: k == "retry"}
				w.elem = l.waiters.PushBack(w)
				if k == "me" {
					me = w
				}
			}
			if got := l.aheadLocked(me); got != tc.want {
				t.Errorf("ahead = %d, want %d", got, tc.want)
			}
		})
	}
}
