package core

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// spendRetryFloor admits and ends retryFloor budgeted retries, so the
// next budgeted retry in the window is over the budget (ratio 0).
func spendRetryFloor(t *testing.T, l *Limiter) {
	t.Helper()
	for range retryFloor {
		mustAcquire(t, l, Request{Retry: true}).Release(Outcome{Success: true, CompletionTokens: -1, TotalTokens: -1})
	}
}

// TestTheRetryBudgetShedsOnlyWhileTheEngineIsBehind: a retry over the
// budget is refused only when the calls ahead of it would not be served
// within its queue bound (half its client's timeout) anyway; a retry of a
// burst the engine drains in time is served.
func TestTheRetryBudgetShedsOnlyWhileTheEngineIsBehind(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queued  int // first attempts waiting behind a held slot
		r       Request
		refused bool
	}{
		{"a retry whose client's timeout is unknown is held to the budget", 0,
			Request{Retry: true}, true},
		{"a retry the idle engine serves within its timeout is admitted", 0,
			Request{Retry: true, Timeout: 6 * time.Second}, false},
		{"a retry behind a queue that drains within its timeout waits its turn", 2,
			Request{Retry: true, Timeout: time.Minute}, false},
		{"a retry behind a queue that would outlast its timeout is refused", 2,
			Request{Retry: true, Timeout: 2 * time.Second}, true},
		{"a retry of a call that never executed is no retry for the budget", 2,
			Request{Retry: true, NeverExecuted: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.MaxInFlight, cfg.RetryRatio, cfg.RetryWindow, cfg.MaxQueueWait = 1, 0, time.Minute, time.Minute
				l := New(cfg)
				spendRetryFloor(t, l) // 5 completions in the window: 0.5 a second
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.queued > 0 {
					blocker := mustAcquire(t, l, Request{})
					defer blocker.Ignore()
					for i := range tc.queued {
						acquireAsync(ctx, l, Request{})
						untilQueued(t, l, i+1)
					}
				}
				ch := acquireAsync(ctx, l, tc.r)
				var a acquired
				if tc.queued == 0 {
					a = get(t, ch)
				} else {
					select {
					case a = <-ch:
					case <-time.After(200 * time.Millisecond): // queued: neither admitted nor refused
					}
				}
				refused := a.rj != nil && a.rj.Reason == ReasonRetryBudget
				if refused != tc.refused {
					t.Errorf("refused by the retry budget: %v (%+v), want %v", refused, a.rj, tc.refused)
				}
				if !tc.refused && a.rj != nil {
					t.Errorf("rejected: %+v", a.rj)
				}
			})
		})
	}
}

// TestNewestFirstServesTheOldestWhenTheQueueDrainsInTime: newest_first
// serves first attempts newest first only while the queue would not
// drain within their clients' timeouts; in a burst that drains in time,
// the oldest goes first, as the engine itself would serve it. A plain
// call whose client's timeout is known goes first while its answer can
// still make that timeout, overload or not (issue 41: served newest
// first, a burst's older calls waited out their clients while they could
// still have been answered, and the engine idled at the burst's end).
func TestNewestFirstServesTheOldestWhenTheQueueDrainsInTime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		warm    int // answers admitted and finished just before: the drain rate
		service time.Duration
		want    int // index of the waiter served first (0 the oldest)
		stream  bool
	}{
		{"a burst that drains within the timeout: oldest first", 10 * time.Second, 40, 100 * time.Millisecond, 0, false},
		{"an overload that outlasts the timeout, plain calls: the oldest still on time", 2 * time.Second, 0, 100 * time.Millisecond, 0, false},
		// Its answer's leeway is two typical answers (0.75 s) until the
		// slow end of 16 is measured: 0.3 s old is past its 1 s timeout.
		{"an overload, the oldest call past its answer's time: the next oldest", time.Second, 0, 375 * time.Millisecond, 1, false},
		{"streams in an overload that outlasts their timeout: newest first", 2 * time.Second, 0, 100 * time.Millisecond, 2, true},
		{"no timeout known, answers quick beside the drain: oldest first", 0, 40, time.Second, 0, false},
		{"no timeout known, no answer measured: newest first", 0, 0, 0, 2, false},
		// Unknown, a plain call's timeout is taken as four typical answers
		// (0.8 s here; 0.4 s of it its answer's leeway), whatever the drain.
		{"no timeout known, an overload: the oldest within a few answers' patience", 0, 0, 200 * time.Millisecond, 0, false},
		{"no timeout known, the oldest past that patience: the next oldest", 0, 0, 100 * time.Millisecond, 1, false},
		// A stream's first token is worth ttft_target (2 s), not its
		// client's 120 s: a queue that serves its newest stream later than
		// that serves the newest first.
		{"streams behind more than ttft_target: newest first", 120 * time.Second, 1, time.Second, 2, true},
		{"plain calls behind as much, within their timeout: oldest first", 120 * time.Second, 1, time.Second, 0, false},
		{"streams the queue serves within ttft_target: oldest first", 120 * time.Second, 40, 100 * time.Millisecond, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := testConfig()
				cfg.MaxInFlight, cfg.Order, cfg.MaxQueueWait = 1, "newest_first", time.Minute
				l := New(cfg)
				for range tc.warm {
					lis := mustAcquire(t, l, Request{})
					advance(tc.service / 40)
					lis.Release(Outcome{Success: true, CompletionTokens: -1, TotalTokens: -1})
				}
				l.mu.Lock()
				l.engineService = tc.service // the answers' typical time, as measured
				l.engineTTFT = tc.service
				l.mu.Unlock()
				blocker := mustAcquire(t, l, Request{})
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var chans []<-chan acquired
				for i := range 3 {
					chans = append(chans, acquireAsync(ctx, l, Request{Timeout: tc.timeout, Stream: tc.stream}))
					untilQueued(t, l, i+1)
					advance(100 * time.Millisecond)
				}
				// The blocker's answer is measured too, unless the row
				// wants none measured.
				blocker.Release(Outcome{Success: tc.service > 0, CompletionTokens: -1, TotalTokens: -1})
				served := -1
				for i, ch := range chans {
					select {
					case a := <-ch:
						if a.lis != nil {
							served = i
							a.lis.Ignore()
						}
					case <-time.After(50 * time.Millisecond):
					}
					if served >= 0 {
						break
					}
				}
				if served != tc.want {
					t.Errorf("waiter %d served first, want %d", served, tc.want)
				}
			})
		})
	}
}
