package core

import (
	"cmp"
	"container/list"
	"math"
	"time"
)

// waiter is one request queued for a slot, or a placeholder: the queue
// place of a keyed call whose attempt ended (its client timed out or was
// told to come back), kept so the call's retry resumes from it. A
// placeholder holds no body, is never admitted and never counts in flight.
type waiter struct {
	// at is the call's place in the queue: when it first queued, kept by
	// a retry that takes over its held place (the order's age).
	at time.Time
	// since is when this attempt queued: its bound and its client's
	// timeout run from here, not from the place's age.
	since time.Time
	// deadline is when its wait expires (a recovery that ends before it
	// keeps it queued).
	deadline time.Time
	ch       chan waitResult // buffered 1: the dispatcher never blocks
	elem     *list.Element
	queued   bool
	bytes    int64 // the body this waiter holds
	// retry: a later attempt of a call (SDK-marked, a key seen before, or a
	// held place taken over). newest_first serves these after every first
	// attempt, oldest call first.
	retry bool
	// lis is the slot's Listener (nil once a placeholder).
	lis *Listener
	// route and tenant infer its client's timeout while it waits, when it
	// announced none: a timeout learned meanwhile applies to it too.
	route, tenant string
	// undivertible: Divert leaves it queued (see Request.Undivertible).
	undivertible bool
	// moved: another vigil moved the call here (see Request.Moved);
	// movedUntil: its home would have held it until then; movedBefore:
	// the calls moved before it still waiting when last judged
	// (movedStaysLocked).
	moved       bool
	movedUntil  time.Time
	movedBefore int
	// held: its bound was reached while the engine was held, and it
	// waits on (see Limiter.expire). bySuspicion: held for a suspicion
	// alone, which a suspicion cleared as false takes back.
	held, bySuspicion bool
	// atVerdict: it was queued when the engine was declared lost
	// (SetRecovering), and goes first when it is back.
	atVerdict bool
	// fresh: a suspicion that held it cleared as false; its bound runs
	// again from then, not from when it queued (the stall's seconds are
	// not its queue's), and no expiry before this refuses it.
	fresh time.Time
	// Placeholders only: the call's key and the timer that drops it.
	placeholder bool
	k           CallKey
	stopHold    func() bool
}

// waitResult: a slot (rej == nil), a rejection, or a diversion.
type waitResult struct {
	rej      *Rejection
	divert   bool
	inFlight int // with a slot: requests in flight, this one included
	// at and area: when the slot was granted, and inFlightArea then.
	at   time.Time
	area float64
}

// enqueueLocked queues a request that found no free slot (room was made).
// A retry of a call whose earlier attempt was queued (ph, its held place)
// resumes from that attempt's place instead of starting over.
func (l *Limiter) enqueueLocked(now time.Time, r Request, ph *waiter, lis *Listener) *waiter {
	var w *waiter
	if ph != nil && ph.queued {
		delete(l.held, r.Key)
		ph.stopHold()
		w = &waiter{at: ph.at, ch: make(chan waitResult, 1), queued: true, elem: ph.elem, retry: true, lis: lis}
		ph.elem.Value = w
		ph.queued = false
	} else {
		w = &waiter{at: now, ch: make(chan waitResult, 1), queued: true, retry: r.Retry, lis: lis}
		w.elem = l.waiters.PushBack(w)
	}
	w.since, w.bytes, w.route, w.tenant = now, r.Bytes, r.Route, r.Tenant
	l.queuedBytes += r.Bytes
	l.queued.Add(1)
	return w
}

func (l *Limiter) removeWaiterLocked(e *list.Element) *waiter {
	w := l.waiters.Remove(e).(*waiter)
	w.queued = false
	if w.placeholder {
		if l.held[w.k] == w {
			delete(l.held, w.k)
		}
		if w.stopHold != nil {
			w.stopHold()
		}
	} else {
		l.queuedBytes -= w.bytes
	}
	return w
}

// liveWaitersLocked is the number of queued requests, placeholders aside.
func (l *Limiter) liveWaitersLocked() int { return l.waiters.Len() - len(l.held) }

// nextWaiterLocked is the live waiter to admit next, placeholders skipped,
// or nil. fifo: the oldest. newest_first: the oldest first attempt still
// on time (onTimeLocked: a plain call while its answer can make its
// client's timeout, known or taken as a few answers' patience; a stream
// while the whole queue drains in time), else the newest first attempt,
// else the oldest retry. The two halves of newest_first answer different
// clients. A first attempt's client is on its first deadline: served in
// time, it counts, and past it the newest can still make it where the
// oldest is about to give up. A retry's client has already missed that
// deadline and comes back a bounded number of times: the oldest call has
// the fewest attempts left, so it goes first, and no retry displaces
// fresh work (retries are what keeps an overload going).
// Without streams, streamed waiters are passed over (the first-token limit
// is full): a plain call behind them still goes. Calls moved here from
// another vigil's held engine go after this node's own first attempts;
// the calls queued at a hang's verdict go before everything, oldest first.
func (l *Limiter) nextWaiterLocked(streams bool) *list.Element {
	live := func(e *list.Element) bool {
		w := e.Value.(*waiter)
		return !w.placeholder && (streams || !w.lis.stream)
	}
	if l.cfg.Order == "fifo" {
		for e := l.waiters.Front(); e != nil; e = e.Next() {
			if live(e) {
				return e
			}
		}
		return nil
	}
	var newest, onTime, oldestRetry, oldestMoved, oldestAtVerdict *list.Element
	now := l.clock.Now()
	drain := time.Duration(math.MaxInt64)
	if rate := l.drainRateLocked(now); rate > 0 {
		drain = time.Duration(float64(l.liveWaitersLocked()) / rate * float64(time.Second))
	}
	objective := l.objectiveLocked() // once a pass, not once a waiter
	for e := l.waiters.Back(); e != nil; e = e.Prev() {
		if !live(e) {
			continue
		}
		w := e.Value.(*waiter)
		switch {
		case w.moved:
			oldestMoved = e
		case w.retry:
			oldestRetry = e
		case w.atVerdict:
			oldestAtVerdict = e
		case l.onTimeLocked(w, now, drain, objective):
			newest, onTime = cmp.Or(newest, e), e
		default:
			newest = cmp.Or(newest, e)
		}
	}
	// The calls queued at the verdict go first, oldest first: the hang
	// held them, the oldest since before it, and newest_first would serve
	// the calls that came during the recovery and after the restart ahead
	// of them (none of them on time any more: in bench/hanglost the calls
	// queued at the hang were still waiting when the run ended). A call
	// moved here from a held engine goes after this node's own first
	// attempts, oldest first: it takes the room they leave, so its
	// clients lose nothing for it (before retries, which go last anyway).
	return cmp.Or(oldestAtVerdict, onTime, newest, oldestMoved, oldestRetry)
}

// movedCheckLocked judges a moved call against this node's room: the
// calls waiting ahead of it (this node's own first attempts and the moved
// before it) at the measured completion rate. It is refused at once when
// they would not be served within maxWait (what its home would hold it);
// otherwise patience bounds its wait at twice that estimate (at least
// movedPatienceFloor): a moved call waits behind this node's own, and one
// waiting longer is being overtaken by this node's own newcomers, a node
// at its cap with its own work. Its home holds it then, as soon.
func (l *Limiter) movedCheckLocked(now time.Time, maxWait time.Duration) (patience time.Duration, rj *Rejection) {
	ahead := 0
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*waiter); !w.placeholder && !w.retry {
			ahead++
		}
	}
	if ahead == 0 {
		return maxWait, nil
	}
	wait := l.estimatedWaitLocked(now, ahead)
	if wait > maxWait {
		return 0, queueRejection(ReasonQueueTimeout, wait)
	}
	return max(2*wait, movedPatienceFloor), nil
}

// movedPatienceFloor is the least a moved call waits behind others before
// it goes home: a second, a few of an engine's answers.
const movedPatienceFloor = time.Second

// movedStaysLocked judges a moved call whose patience ran out: it waits
// on when this node has room after all, and goes home otherwise. Room:
// answers complete, fewer calls moved before it wait than at its last
// judgement (this node serves them: it is not at its cap with its own
// work, whose first attempts go first and would keep them waiting, which
// the patience is there to find), and the calls to be served before it
// would be served before its home would serve it. That is a burst of
// calls cut at a verdict onto a peer with room: they queue behind each
// other for a few seconds, and the last of them would otherwise go home
// and wait for the restart (bench/hanglost, a peer at 0.8 of its engine:
// 1-4 of 34 held 43-44 s). Staying on without moving up is not room: a
// moved call that waited at a peer at its cap for its home's whole
// expected outage (90 s for a first one, against a 45 s restart) came
// home after the engine was back, behind its backlog.
func (l *Limiter) movedStaysLocked(now time.Time, w *waiter) bool {
	if !now.Before(w.movedUntil) || l.completionRateLocked(now) <= 0 {
		return false
	}
	moved := l.movedBeforeLocked(w)
	if moved >= w.movedBefore || !now.Add(l.estimatedWaitLocked(now, l.aheadLocked(w))).Before(w.movedUntil) {
		return false
	}
	w.movedBefore = moved
	return true
}

// movedBeforeLocked counts the calls moved here before w still waiting.
func (l *Limiter) movedBeforeLocked(w *waiter) int {
	n := 0
	for e := l.waiters.Front(); e != nil && e != w.elem; e = e.Next() {
		if o := e.Value.(*waiter); o.moved && !o.placeholder {
			n++
		}
	}
	return n
}

// onTimeLocked: served now, w still gets what its client waits for. A
// plain call: its answer, its leeway left of the client's timeout
// (announced, inferred now, or else a few typical answers' patience),
// whatever waits behind it: newest_first serves the oldest such call
// first, earliest deadline first. A stream: its first token, at the
// engine's typical time to first token, within its client's timeout or
// the TTFT objective in force, and so would the newest stream behind it
// once the queue drains (drain: the live queue over its drain rate).
// Then the queue is a burst the engine absorbs and the oldest goes
// first, as the engine itself would; in an overload the newest streams
// go first, so fresh ones keep their first token on time.
func (l *Limiter) onTimeLocked(w *waiter, now time.Time, drain, objective time.Duration) bool {
	service := l.engineService
	if w.lis.stream {
		service = l.engineTTFT
	}
	deadline := w.lis.deadline
	if deadline <= 0 {
		deadline = l.deadlines.infer(w.route, l.tenants.clientTimeout(w.tenant))
	}
	if deadline <= 0 {
		// No timeout known (yet: a route's is learned from its first
		// give-ups): a client patient enough to use this engine at all
		// waits a few of its typical answers.
		deadline = patienceServices * service
	}
	if !w.lis.stream && deadline > 0 {
		// A plain call: served now, it either gets its answer within its
		// client's timeout (its answer's leeway left of it) or it does
		// not, whatever waits behind it. The newest behind it are not
		// owed the slot: each waits to its own bound (plainWaitLocked)
		// and is told then, or at once (plainCheckLocked), when the queue
		// will not reach it. Served newest first in an overload, the
		// queue skipped its older calls while they could still be
		// answered, and at a burst's end it held only calls past saving
		// while the engine idled: earliest deadline first keeps the
		// engine on calls that still count until the last deadline
		// (docs/design.md, the first second of a burst). That holds for
		// the patience taken for an unknown timeout too: a burst served
		// newest first until the first clients gave up left its older
		// calls to wait out their timeout in the queue.
		return now.Sub(w.since)+l.answerLeewayLocked() <= deadline
	}
	if w.lis.stream && objective > 0 {
		// A stream's first token is worth ttft_target, whatever the
		// client would put up with: a queue that cannot serve its newest
		// stream within it serves the newest first, so fresh streams keep
		// their first token on time while the old still wait within their
		// bound.
		deadline = min(deadline, objective)
	}
	return max(now.Sub(w.at), drain)+service <= deadline
}

// patienceServices typical answer times are the patience assumed of a
// client whose timeout is unknown (see onTimeLocked).
const patienceServices = 4

// holdLocked turns a keyed waiter whose attempt ended into a placeholder
// for d: a retry of the same call arriving meanwhile takes its place in
// the queue; otherwise it is dropped, never admitted.
func (l *Limiter) holdLocked(w *waiter, k CallKey, d time.Duration) {
	l.queuedBytes -= w.bytes
	w.bytes = 0
	w.placeholder, w.k, w.lis = true, k, nil
	l.held[k] = w
	w.stopHold = l.clock.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.queued && l.held[k] == w {
			l.removeWaiterLocked(w.elem)
		}
	})
}

// dispatchLocked hands freed slots to waiters, newest or oldest first.
func (l *Limiter) dispatchLocked(now time.Time) {
	if l.recovering || l.suspectStop {
		return // nothing goes to an engine being recovered or suspected; the queue waits for it
	}
	c := l.capLocked(now)
	for l.inFlight < c {
		e := l.nextWaiterLocked(l.firstTokenRoomLocked(true))
		if e == nil {
			return
		}
		w := l.removeWaiterLocked(e)
		w.lis.heldWait = w.held
		w.lis.startAwaitingLocked()
		l.addInFlightLocked(now, 1)
		l.admitted.Add(1)
		l.admissions.add(now)
		w.ch <- waitResult{inFlight: l.inFlight, at: now, area: l.inFlightArea}
	}
}

// aheadLocked counts the calls to be served before w's call comes back
// and resumes its place: for fifo every entry in front of it; for
// newest_first every first attempt waiting (they go first) plus the
// retries and held places in front of it (older calls). Held places count:
// their clients are coming back too. This is what makes the Retry-After of
// a call deep in a backlog honest, and long (up to the 60 s the SDKs obey).
func (l *Limiter) aheadLocked(w *waiter) int {
	n, before := 0, true
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if e == w.elem {
			before = false
			continue
		}
		o := e.Value.(*waiter)
		switch {
		case before && (l.cfg.Order == "fifo" || o.placeholder || o.retry):
			n++
		case l.cfg.Order != "fifo" && !o.placeholder && !o.retry:
			n++
		}
	}
	return n
}

// makeRoomLocked makes room in the queue for a waiter holding n bytes of
// body (in a new entry, or in a held place it takes over): within
// max_queue entries and max_queue_bytes. Placeholders make room first
// (they are only a chance of a retry); then newest_first turns away the
// oldest waiters, whose clients are the closest to giving up, and fifo
// turns away the newcomer (the returned rejection). Calls moved here from
// another vigil (moved) are turned away before any of this node's own,
// oldest first: their home holds them; and a moved newcomer takes no
// place from a waiter, it is turned away itself.
func (l *Limiter) makeRoomLocked(now time.Time, n int64, newEntry, moved bool) *Rejection {
	full := func() bool {
		return (newEntry && l.waiters.Len() >= l.cfg.MaxQueue) ||
			(l.cfg.MaxQueueBytes > 0 && l.queuedBytes+n > l.cfg.MaxQueueBytes)
	}
	if l.cfg.MaxQueue == 0 || (l.cfg.MaxQueueBytes > 0 && n > l.cfg.MaxQueueBytes) {
		return queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))
	}
	for e := l.waiters.Front(); e != nil && full(); {
		next := e.Next()
		if e.Value.(*waiter).placeholder {
			l.removeWaiterLocked(e)
		}
		e = next
	}
	for full() && !moved {
		e := l.nextMovedLocked()
		if e == nil {
			break
		}
		l.removeWaiterLocked(e).ch <- waitResult{rej: queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))}
	}
	for full() {
		if moved || l.cfg.Order == "fifo" || l.liveWaitersLocked() == 0 {
			return queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))
		}
		old := l.removeWaiterLocked(l.nextOldestLocked())
		old.ch <- waitResult{rej: queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))}
	}
	return nil
}

// nextMovedLocked is the oldest waiter moved here from another vigil, or
// nil.
func (l *Limiter) nextMovedLocked() *list.Element {
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*waiter); w.moved && !w.placeholder {
			return e
		}
	}
	return nil
}

// nextOldestLocked is the oldest live waiter (there must be one).
func (l *Limiter) nextOldestLocked() *list.Element {
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if !e.Value.(*waiter).placeholder {
			return e
		}
	}
	return nil
}

func queueRejection(reason string, wait time.Duration) *Rejection {
	msg := "The engine is at capacity and the admission queue is full; retry after the indicated delay."
	if reason == ReasonQueueTimeout {
		msg = "The engine is at capacity and this request waited too long for a slot; retry after the indicated delay."
	}
	return &Rejection{Reason: reason, Message: msg, Wait: wait}
}
