package core

import (
	"container/list"
	"time"
)

// A plain call's queue wait against what it can still get (issue 41). A
// call whose client's timeout is known (announced, or inferred from the
// route) waits in the queue at most part of it (maxWaitLocked); one the
// queue will not reach within that bound at the measured drain rate was
// answered 503 only when the bound ran out: half its client's timeout
// spent in vigil's queue for nothing, and too late for a client that
// retries within one timeout of the whole call (the Vercel AI SDK: its
// abort covers its retries) to use the Retry-After. plainCheckLocked
// answers it at once instead; a call the queue reaches in time waits.

// plainCheckLocked turns a plain call away at once when, at the measured
// drain rate, the queue would not reach it within bound (its queue wait
// bound). Its place in the queue is the one nextWaiterLocked will give it:
// under newest_first a queue that drains within its waiters' timeouts is
// served oldest first, so every live waiter is ahead of it; in an
// overload the newest goes first, and only retries wait behind the rest.
// Unknown timeouts, keyed calls (their place and execution outlive the
// attempt: they wait by design) and a held engine (its pace says nothing
// of when the queue moves) are left to wait.
func (l *Limiter) plainCheckLocked(now time.Time, r Request, ph *waiter, bound, timeout time.Duration) *Rejection {
	if r.Stream || r.Keyed || timeout <= 0 || l.holdingLocked(now) {
		return nil
	}
	pos := l.positionLocked(r, ph)
	if pos == 0 && l.cfg.Order != "fifo" && !r.Retry && l.oldestOnTimeLocked() {
		pos = l.liveWaitersLocked()
	}
	if pos == 0 {
		// Served next (or with the next slot that frees): its wait is
		// one answer's, which its bound was made for.
		return nil
	}
	if now.Sub(l.busySince) < bound {
		// A busy period younger than the bound measures its drain rate
		// over a whole second (drainRateLocked): a burst's start reads as
		// a slow engine.
		return nil
	}
	rate := l.drainRateLocked(now)
	if rate <= 0 || float64(pos+1)/rate <= bound.Seconds() {
		return nil
	}
	return &Rejection{Reason: ReasonQueueTimeout, Wait: l.estimatedWaitLocked(now, pos),
		Message: "The engine is at capacity and the queue would not reach this request before its client's " +
			"timeout; retry after the indicated delay."}
}

// oldestOnTimeLocked reports whether newest_first now serves its oldest
// on-time waiter first (see nextWaiterLocked): the queue drains within
// its waiters' timeouts.
func (l *Limiter) oldestOnTimeLocked() bool {
	e := l.nextWaiterLocked(true)
	if e == nil {
		return false
	}
	w := e.Value.(*waiter)
	return !w.retry && e == l.nextOldestFirstLocked()
}

// nextOldestFirstLocked is the oldest live first attempt, or nil.
func (l *Limiter) nextOldestFirstLocked() *list.Element {
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*waiter); !w.placeholder && !w.retry {
			return e
		}
	}
	return nil
}
