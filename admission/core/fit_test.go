package core

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// Issue 41: a plain call the queue will not reach within its bound (half
// its client's timeout) waited that whole bound and then got its 503, too
// late for a client whose one timeout covers its retries. It is answered
// at once now, with the honest Retry-After; calls the queue reaches in time
// wait, as do calls whose timeout is unknown and keyed ones.
//
// The drain rate is about 3.6 admissions a second (9 in the last 2.5 s)
// and the engine's answers take 0.5 s. A plain call waits up to its
// timeout less two answers, at least half of it: with a 3 s timeout (bound
// 2 s) the queue reaches 7 waiters in time, the 8th and later not; with
// 4 s (bound 3 s; half of it, 2 s, told the 8th at once) and 20 s it
// reaches all 10; with 1.6 s half of it (0.8 s) is the bound.
func TestAPlainCallTheQueueCannotReachInTimeIsToldAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		r         Request
		wantQueue int // waiters queued of 10 before the first is refused
	}{
		{"a 3 s timeout: the 8th is told at once", Request{Timeout: 3 * time.Second}, 7},
		{"a 4 s timeout: all wait, two answers' time left of it", Request{Timeout: 4 * time.Second}, 10},
		{"a 1.6 s timeout: half of it, the 3rd is told at once", Request{Timeout: 1600 * time.Millisecond}, 2},
		{"a 20 s timeout: all wait", Request{Timeout: 20 * time.Second}, 10},
		{"no timeout known: all wait", Request{}, 10},
		{"keyed calls keep their place: all wait", Request{Timeout: 4 * time.Second, Keyed: true}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.MaxInFlight, cfg.Order, cfg.MaxQueue, cfg.MaxQueueWait = 1, "newest_first", 64, time.Minute
				l := New(cfg)
				for range 8 {
					lis := mustAcquire(t, l, Request{})
					advance(500 * time.Millisecond)
					lis.Release(Outcome{Success: true, CompletionTokens: -1, TotalTokens: -1})
				}
				blocker := mustAcquire(t, l, Request{})
				advance(2500 * time.Millisecond)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				queued := 0
				for i := range 10 {
					r := tc.r
					if r.Keyed {
						r.Key[0] = byte(i + 1)
					}
					ch := acquireAsync(ctx, l, r)
					synctest.Wait()
					select {
					case a := <-ch:
						if a.rj == nil || a.rj.Reason != ReasonQueueTimeout || a.rj.Wait <= 0 {
							t.Fatalf("waiter %d: %v %v %v, want queued or %s with a Retry-After", i, a.lis, a.rj, a.err, ReasonQueueTimeout)
						}
					default:
						queued++
						continue
					}
					break
				}
				if queued != tc.wantQueue {
					t.Errorf("%d calls queued before one was told at once, want %d", queued, tc.wantQueue)
				}
				cancel()
				synctest.Wait()
				blocker.Release(Outcome{})
			})
		})
	}
}
