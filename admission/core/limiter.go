package core

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
)

const (
	// completionSpan is the window of the measured completion rate that
	// Retry-After is computed from, and of the queue's drain rate, while
	// it holds paceEvents of them (see eventRate).
	completionSpan = 10 * time.Second
	// unknownWait is the Retry-After when nothing has completed lately, so
	// no rate is known.
	unknownWait = 5 * time.Second
	// slowStartFloor is where the cap starts its ramp after a recovery.
	slowStartFloor = 0.1
	// keyedWaitShare of its client's timeout is the queue wait of a
	// coalesced keyed call: the 503 with Retry-After must reach the client
	// before its own timeout does, so it waits out the delay and resumes
	// its held place instead of retrying at once. As late as that allows:
	// the call's place and its execution both outlive the attempt, so a
	// longer wait costs it nothing, and each attempt answered just before
	// the client gives up, followed by a Retry-After of up to 60 s,
	// stretches the call's life (4 attempts of 116 s and 3 waits of 60 s
	// for an SDK with 120 s and 3 retries). 3% of the timeout (3.6 s of
	// 120 s) is left for the network and the client's own clock.
	keyedWaitShare = 0.97
)

// CallKey identifies one call across its attempts (the transport derives
// it, e.g. from an idempotency key and the request); a keyed call's queue
// place outlives its attempt for a retry to resume.
type CallKey [sha256.Size]byte

// Request is what the core needs to know of a request asking for a slot,
// whatever transport carried it.
type Request struct {
	Tenant string // the client key's hash; its quotas apply (see configs.Tenants)
	Tokens int    // estimated prompt plus output tokens, charged to the tenant
	Prompt int    // the estimated prompt tokens (of Tokens)
	// Retry: a later attempt of a call (the client says so, or its key was
	// seen). NeverExecuted: a retry of a call none of whose attempts got an
	// execution; it cannot amplify work, so it is neither budgeted nor
	// counted as a first attempt.
	Retry, NeverExecuted bool
	// Timeout is the client's own timeout as it announced it (e.g. the
	// SDKs' X-Stainless-Timeout; 0: none, then it is inferred: see
	// GaveUp): the queue wait is cut to part of it, and the automatic cap
	// keeps plain answers within it.
	Timeout time.Duration
	// Route names what is asked (the HTTP path): client timeouts are
	// configured and learned per route.
	Route string
	// Stream: the answer is streamed. Its queue wait is bounded by what
	// its first token is still worth, and it is turned away at once when
	// the queue would not reach it within that bound.
	Stream bool
	// Keyed: the call has a Key; its queue place survives the attempt.
	// Coalesced: its execution, too, outlives the attempt (a retry attaches
	// to it), so it may wait longer (see keyedWaitShare).
	Keyed, Coalesced bool
	Key              CallKey
	Bytes            int64 // the body it holds while queued
	// Undivertible: the call was offered to a peer already (or must not
	// move); Divert leaves it queued.
	Undivertible bool
	// Diverted: Divert took the call out of this queue and no peer took
	// it; queued again while the engine is recovered, it keeps its
	// standing as a call queued at the verdict (SetRecovering).
	Diverted bool
	// Arrived is when the call reached this node (zero: now). One that
	// arrived before the last verdict and queues only now was in this
	// node's hands at the verdict all along (at a peer at its cap, which
	// kept it and sent it home): it keeps the standing of a call queued at
	// the verdict even after the engine is back. Without it, it came home
	// behind the restart's backlog, later than with no peer at all.
	Arrived time.Time
	// Moved: another vigil moved the call here (its own engine is held or
	// lost). It queues whatever the cap, after this node's own first
	// attempts (nextWaiterLocked): it takes the room they leave, and this
	// node's own clients lose nothing for it. It never takes a queue place
	// from this node's own calls: it is refused
	// when the queue is full, and the first turned away when they need the
	// room. Its bound is its client's (no stream deadline: its first token
	// is late already) and MaxWait, and holds even while this engine is
	// held. It is refused at once when the calls waiting ahead of it would
	// not be served within that bound, and after twice what they should
	// take (this node's own newcomers overtake it). A refusal sends it
	// home, where it is held.
	Moved bool
	// MaxWait (moved calls only) is how long its home would hold it: a
	// wait here longer than that answers it later than the home would
	// (0: no bound but its client's).
	MaxWait time.Duration
}

// budgeted: a retry that would start a new execution of its call.
func (r Request) budgeted() bool { return r.Retry && !r.NeverExecuted }

// ErrClientGone is Acquire's error when the context ended while the
// request waited in the queue: nobody is left to answer.
var ErrClientGone = errors.New("client went away")

// ErrDiverted is Acquire's error when Divert took the request out of the
// queue: the transport sends it elsewhere (a pool peer).
var ErrDiverted = errors.New("diverted from a stalled engine")

// Option adjusts a Limiter built by New.
type Option func(*Limiter)

// WithClock replaces the wall clock (a time-scaled engine's, bench/).
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// WithLogger sets where the core logs its control changes; the default
// discards.
func WithLogger(e *logrus.Entry) Option { return func(l *Limiter) { l.log = e } }

// WithProgress tells the core when the engine last made progress (a
// byte of any answer; the transport sees them): a queue wait that
// reaches its bound while nothing progressed since it began is not
// refused yet (see expire). Without it, every bound refuses.
func WithProgress(last func() time.Time) Option { return func(l *Limiter) { l.progress = last } }

// WithLimit replaces the automatic cap, the limit in force while
// max_in_flight is 0.
func WithLimit(lim Limit) Option { return func(l *Limiter) { l.auto = lim } }

// Limiter decides admission: which request gets one of the cap's slots
// now, which waits in the queue and for how long, and which is turned away
// with the delay after which a retry can succeed. Acquire asks; the
// Listener it returns ends the slot with the request's outcome.
type Limiter struct {
	cfg   configs.Admission
	clock Clock
	log   *logrus.Entry

	mu       sync.Mutex
	fixed    int   // > 0: a fixed cap; 0: the automatic one
	auto     Limit // the automatic cap, in force while fixed == 0
	fixedCap Limit // the fixed cap, while fixed > 0
	inFlight int
	// inFlightArea is the integral of inFlight over time (request-seconds)
	// up to inFlightSince: the difference between two readings over the
	// time between them is the mean in flight, what an answer ran beside.
	inFlightArea  float64
	inFlightSince time.Time
	waiters       list.List // of *waiter, oldest first
	// held indexes the placeholders in waiters: queue places of keyed calls
	// whose attempt ended, kept for a retry of the same call to take over.
	held        map[CallKey]*waiter
	queuedBytes int64 // request bodies held by live waiters
	saturated   bool
	recovering  bool
	verdictAt   time.Time // the last SetRecovering(true): a hang's verdict
	// suspected: the engine is suspected stalled (package admission's
	// stall watch): nobody is refused for it; suspectStop: nothing new
	// goes to it either (a peer takes the calls).
	suspected, suspectStop bool
	slowFrom               time.Time // zero: no slow start running
	tenants                *tenantTable
	budget                 *retryBudget
	completions            *eventRate
	deadlines              *deadlines
	// admissions over the last completionSpan, since busySince (when the
	// last idle spell ended): the queue's drain rate.
	admissions *eventRate
	busySince  time.Time
	// Last reading of the engine's queue gauges (-1: none yet).
	engineWaiting, engineRunning float64
	// engineTTFT is the streams' typical time to first token at the
	// engine (queue wait excluded), an exponential average of what
	// Listener.FirstToken reports; 0 before the first.
	engineTTFT time.Duration
	// engineService is the plain answers' typical time from admission to
	// their last byte, an exponential average like engineTTFT; 0 before
	// the first.
	engineService time.Duration
	// answers are the last plain answers' times from admission to their
	// last byte: their slow end is what a plain call's timeout must
	// leave for its answer (answerLeewayLocked).
	answers durationRing
	// awaitingFirst counts the streams in flight whose first token has not
	// come yet (see FirstTokenLimiter).
	awaitingFirst int

	admitted, queued, abandoned atomic.Uint64
	// progress is when the engine last progressed (WithProgress; nil:
	// unknown).
	progress func() time.Time
	// heldWaits counts queue waits that reached their bound while the
	// engine was held, and went on (under mu).
	heldWaits uint64
}

// New builds the core from the admission config (validated by package
// configs): max_in_flight, ttft_target, the queue's bounds and order,
// cancel_after, the retry budget, slow_start and the tenants.
func New(cfg configs.Admission, opts ...Option) *Limiter {
	l := &Limiter{
		cfg:           cfg,
		clock:         WallClock,
		fixed:         cfg.MaxInFlight,
		tenants:       newTenantTable(cfg.Tenants),
		held:          map[CallKey]*waiter{},
		engineWaiting: -1,
		engineRunning: -1,
		budget:        newRetryBudget(cfg.RetryRatio, cfg.RetryWindow),
		completions:   newEventRate(),
		admissions:    newEventRate(),
		deadlines:     newDeadlines(cfg.ClientTimeouts),
		answers:       newDurationRing(answersKept),
	}
	for _, o := range opts {
		o(l)
	}
	if l.log == nil {
		l.log = discardLogger()
	}
	if l.auto == nil {
		l.auto = NewAuto(cfg.TTFTTarget, cfg.EngineMaxSeqs, l.clock.Now())
	}
	traceSteps(l.auto, l.log)
	if l.fixed > 0 {
		l.fixedCap = NewFixed(l.fixed, cfg.EngineMaxSeqs)
	}
	return l
}

func discardLogger() *logrus.Entry {
	lg := logrus.New()
	lg.SetOutput(discard{})
	return logrus.NewEntry(lg)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// limitLocked is the Limit in force.
func (l *Limiter) limitLocked() Limit {
	if l.fixed > 0 {
		return l.fixedCap
	}
	return l.auto
}

// demandLocked tells the Limit in force that a request found it full:
// the cap, or with firstToken the first-token limit (the cap had room).
func (l *Limiter) demandLocked(firstToken bool) {
	if firstToken {
		if f, ok := l.limitLocked().(FirstTokenLimiter); ok {
			f.OnFirstTokenDemand()
		}
		return
	}
	if p, ok := l.limitLocked().(Prober); ok {
		p.OnDemand()
	}
}

// objectiveLocked is the TTFT objective in force (0: none): ttft_target,
// or with auto the automatic cap's (AutoObjective of the engine's own
// prefill time). A fixed cap measures no lone prefill; the streams'
// typical TTFT under it stands in.
func (l *Limiter) objectiveLocked() time.Duration {
	if !l.cfg.TTFTTarget.IsAuto() {
		return l.cfg.TTFTTarget.Duration()
	}
	if o, ok := l.limitLocked().(Objectiver); ok {
		return o.Objective()
	}
	return AutoObjective(l.engineTTFT)
}

// firstTokenLimitLocked is the first-token limit in force; 0: none.
func (l *Limiter) firstTokenLimitLocked() int {
	if f, ok := l.limitLocked().(FirstTokenLimiter); ok {
		return f.FirstTokenLimit()
	}
	return 0
}

// capLocked is the cap in force now: fixed or automatic, ramped by slow
// start.
func (l *Limiter) capLocked(now time.Time) int {
	c := l.limitLocked().Limit()
	if !l.slowFrom.IsZero() {
		el := now.Sub(l.slowFrom)
		if el >= l.cfg.SlowStart {
			l.slowFrom = time.Time{}
		} else {
			f := slowStartFloor + (1-slowStartFloor)*float64(el)/float64(l.cfg.SlowStart)
			c = max(1, int(math.Round(float64(c)*f)))
		}
	}
	return c
}

// Acquire asks for a slot. It applies, in order: recovery, the tenant's
// quotas, the retry budget, then the cap and its queue. It returns the
// slot's Listener, a Rejection, or ErrClientGone when ctx ended while the
// request was queued (it leaves the queue at once; a keyed call's place
// is held for its retry).
func (l *Limiter) Acquire(ctx context.Context, r Request) (*Listener, *Rejection, error) {
	l.mu.Lock()
	now := l.clock.Now()
	timeout := l.timeoutLocked(r)
	l.noteStreamLocked(r, false)
	lis, rj := l.chargeLocked(now, r, timeout)
	if rj != nil {
		l.mu.Unlock()
		return nil, rj, nil
	}
	l.dispatchLocked(now) // the cap may have grown since the last release (slow start)
	ph := l.held[r.Key]
	if !r.Keyed {
		ph = nil
	}
	if l.admitLocked(now, lis, ph) {
		l.mu.Unlock()
		return lis, nil, nil
	}
	l.demandLocked(l.inFlight < l.capLocked(now) && !l.firstTokenRoomLocked(r.Stream))
	l.queuedPastCapLocked(now)
	maxWait := l.maxWaitLocked(r, timeout)
	var homeWait time.Duration // a moved call's: what its home would hold it
	if r.Moved {
		maxWait = l.queueWaitFor(timeout, r.Coalesced)
		if r.MaxWait > 0 {
			maxWait = min(maxWait, r.MaxWait)
		}
		homeWait = maxWait
		patience, rj := l.movedCheckLocked(now, maxWait)
		if rj != nil {
			l.undoLocked(now, lis)
			l.mu.Unlock()
			return nil, rj, nil
		}
		maxWait = min(maxWait, patience)
	}
	if r.Stream && !r.Moved && !l.holdingLocked(now) {
		if rj := l.streamCheckLocked(now, r, ph, maxWait); rj != nil {
			l.undoLocked(now, lis)
			l.mu.Unlock()
			return nil, rj, nil
		}
	}
	if !r.Moved { // a moved call's room was judged above (movedCheckLocked)
		if rj := l.plainCheckLocked(now, r, ph, maxWait, timeout); rj != nil {
			l.undoLocked(now, lis)
			l.mu.Unlock()
			return nil, rj, nil
		}
	}
	if rj := l.makeRoomLocked(now, r.Bytes, ph == nil, r.Moved); rj != nil {
		l.undoLocked(now, lis)
		l.mu.Unlock()
		return nil, rj, nil
	}
	w := l.enqueueLocked(now, r, ph, lis)
	w.deadline = now.Add(maxWait)
	w.undivertible, w.moved = r.Undivertible, r.Moved
	if r.Moved {
		w.movedUntil, w.movedBefore = now.Add(homeWait), l.movedBeforeLocked(w)
	}
	w.atVerdict = (r.Diverted && l.recovering) || (!r.Arrived.IsZero() && r.Arrived.Before(l.verdictAt))
	// Queued while the engine is held: its bound would judge a pace the
	// engine does not have (see expire).
	l.markHeldLocked(now, w)
	l.mu.Unlock()
	return l.wait(ctx, r, lis, w, maxWait, timeout)
}

// chargeLocked turns a request away while the engine restarts, or over its
// tenant's quotas or the retry budget; otherwise it charges both and
// returns the Listener the slot will be granted to.
func (l *Limiter) chargeLocked(now time.Time, r Request, timeout time.Duration) (*Listener, *Rejection) {
	if !r.Retry {
		l.budget.first(now)
	}
	t := l.tenants.lookup(r.Tenant, now)
	if t != nil {
		if v := t.check(now, r.Tokens); v.reason != "" {
			rj := &Rejection{Reason: v.reason, Wait: v.wait, Final: v.never, Message: tenantMessage(t, v)}
			if v.reason == ReasonTenantInFlight {
				rj.Wait = l.estimatedWaitLocked(now, 0)
			}
			return nil, rj
		}
	}
	if r.budgeted() {
		if ok, wait := l.budget.take(now); !ok {
			if l.behindLocked(now, r, timeout) {
				return nil, &Rejection{Reason: ReasonRetryBudget, Wait: wait,
					Message: "Too many retries: retries that start new work are limited to a share of " +
						"first attempts; retry after the indicated delay, with the same Idempotency-Key."}
			}
			l.budget.charge(now)
		}
	}
	if t != nil {
		t.charge(now, r.Tokens)
	}
	return &Listener{l: l, tenant: t, tokens: r.Tokens, prompt: r.Prompt, retry: r.budgeted(), deadline: timeout,
		stream: r.Stream}, nil
}

// behindLocked reports whether the engine is behind for r: the calls
// ahead of it, in vigil's queue and the engine's, would not be served
// within its queue bound (part of its client's timeout) at the measured
// completion rate. The retry budget guards against a storm that keeps the
// engine above capacity, not against a burst it drains within its clients'
// timeouts: refusing a retry of such a burst only turns a slow answer into
// a failed call. Without a known timeout there is no telling, and the
// budget holds.
func (l *Limiter) behindLocked(now time.Time, r Request, timeout time.Duration) bool {
	if timeout <= 0 {
		return true
	}
	ahead := l.liveWaitersLocked() + int(max(0, l.engineWaiting))
	if ahead == 0 && l.inFlight < l.capLocked(now) {
		return false
	}
	if l.completionRateLocked(now) <= 0 {
		return true // a queue and nothing finishing: behind by any measure
	}
	return l.estimatedWaitLocked(now, ahead) > l.maxWaitLocked(r, timeout)
}

// admitLocked grants a slot at once when one is free and nobody waits for
// it (streams held by the first-token limit do not wait for a plain call's
// slot); a keyed call's held place (ph) is no longer needed then.
func (l *Limiter) admitLocked(now time.Time, lis *Listener, ph *waiter) bool {
	c := l.capLocked(now)
	room := l.firstTokenRoomLocked(true)
	// A waiter who could go now goes first. While streams may go, that is
	// any live waiter; only with the first-token limit full does the queue
	// need a look for a plain call.
	waiting := l.liveWaitersLocked() > 0
	if waiting && !room {
		waiting = l.nextWaiterLocked(false) != nil
	}
	if l.inFlight >= c || (lis.stream && !room) || waiting || l.recovering || l.suspectStop {
		return false
	}
	if ph != nil {
		l.removeWaiterLocked(ph.elem)
	}
	l.addInFlightLocked(now, 1)
	l.admitted.Add(1)
	l.admissions.add(now)
	if l.inFlight >= c {
		l.demandLocked(false)
	}
	lis.admitted, lis.inFlightAt, lis.areaAt = now, l.inFlight, l.inFlightArea
	lis.startAwaitingLocked()
	return true
}

// firstTokenRoomLocked: a stream may go upstream without passing the
// first-token limit (anything else always may).
func (l *Limiter) firstTokenRoomLocked(stream bool) bool {
	n := l.firstTokenLimitLocked()
	return !stream || n == 0 || l.awaitingFirst < n
}

// wait blocks until the request's slot, its rejection (queue full behind
// newer work, wait expired), a diversion, or its client's departure. A
// wait that reaches its bound while the engine is held (holdingLocked) is
// not refused for it: it waits another bound, within its client's timeout
// when known.
func (l *Limiter) wait(ctx context.Context, r Request, lis *Listener, w *waiter, maxWait, timeout time.Duration) (*Listener, *Rejection, error) {
	var res waitResult
	for got := false; !got; {
		fired := make(chan struct{})
		stop := l.clock.AfterFunc(maxWait, func() { close(fired) })
		select {
		case res = <-w.ch:
			got = true
		case <-fired:
			l.expire(r, w, timeout)
		case <-ctx.Done():
			stop()
			return l.gone(r, lis, w)
		}
		stop()
	}
	if res.divert {
		l.mu.Lock()
		l.undoLocked(l.clock.Now(), lis)
		l.mu.Unlock()
		return nil, nil, ErrDiverted
	}
	if res.rej != nil {
		l.mu.Lock()
		l.undoLocked(l.clock.Now(), lis)
		l.mu.Unlock()
		return nil, res.rej, nil
	}
	lis.admitted, lis.inFlightAt, lis.areaAt = res.at, res.inFlight, res.area
	return lis, nil, nil
}

// gone ends the wait of a request whose client left.
func (l *Limiter) gone(r Request, lis *Listener, w *waiter) (*Listener, *Rejection, error) {
	l.mu.Lock()
	if w.queued && !w.placeholder {
		if r.Keyed && l.cfg.CancelAfter > 0 && l.held[r.Key] == nil {
			// Like an execution's deferred cancellation: the client's
			// retry (SDK backoff of a few seconds) resumes from here.
			l.holdLocked(w, r.Key, l.cfg.CancelAfter)
		} else {
			l.removeWaiterLocked(w.elem)
		}
		l.undoLocked(l.clock.Now(), lis)
		// Counted before the lock is let go: a stats read that finds the
		// waiter gone finds it counted too.
		l.abandoned.Add(1)
		l.mu.Unlock()
		return nil, nil, ErrClientGone
	}
	l.mu.Unlock()
	// A slot, a rejection or a diversion was handed over just as the
	// client left.
	if res := <-w.ch; res.rej == nil && !res.divert {
		lis.admitted = l.clock.Now()
		lis.Ignore()
	} else {
		l.mu.Lock()
		l.undoLocked(l.clock.Now(), lis)
		l.mu.Unlock()
	}
	l.abandoned.Add(1)
	return nil, nil, ErrClientGone
}

// expire ends a wait that reached its bound: a 503 with the honest delay;
// a keyed call's place is held until its client comes back. While the
// engine is held (suspected stalled, recovered, or ramping after a
// restart) the wait goes on instead: its bound judges the engine's pace,
// and an engine that stopped has none; only the client's own timeout
// (when known) ends it.
func (l *Limiter) expire(r Request, w *waiter, timeout time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !w.queued || w.placeholder {
		return
	}
	now := l.clock.Now()
	// Nothing progressed since it queued: the engine may have stopped, and
	// the suspicion (package admission) is still deciding; a refusal now
	// would be for the engine's silence, not its pace.
	silent := l.progress != nil && l.progress().Before(w.since)
	if !r.Moved && now.Before(w.fresh) && (timeout <= 0 || now.Sub(w.since) < timeout) {
		l.dispatchLocked(now)
		return // a false suspicion held it: its bound runs again from its end
	}
	if !r.Moved && (silent || w.held || l.holdingLocked(now)) && (timeout <= 0 || now.Sub(w.since) < timeout) {
		// Once held, always: the engine's return finds the work the
		// hang held up ahead of it (streams continued, calls held), and
		// a refusal then is still the hang's. A wait deferred only for
		// silence is not marked: once the engine progresses, its next
		// bound refuses as usual (a long plain answer is silent too).
		l.heldWaits++
		if !silent || l.holdingLocked(now) {
			l.markHeldLocked(now, w)
		}
		l.dispatchLocked(now) // a slow start's cap grows with time alone
		return
	}
	if r.Moved && l.movedStaysLocked(now, w) {
		l.dispatchLocked(now)
		return
	}
	rj := queueRejection(ReasonQueueTimeout, l.estimatedWaitLocked(now, l.aheadLocked(w)))
	l.noteStreamLocked(r, true)
	if r.Keyed && l.held[r.Key] == nil {
		// The client comes back after Retry-After: keep its place that
		// long, plus cancel_after for the retry's own delays.
		l.holdLocked(w, r.Key, min(rj.Wait*6/5, MaxRetryAfter)+l.cfg.CancelAfter)
	} else {
		l.removeWaiterLocked(w.elem)
	}
	w.ch <- waitResult{rej: rj}
}

// holdingLocked: the engine is suspected stalled, being recovered, or
// ramping after a restart (slow start). Its drain rate then says nothing
// of when a waiter is served, so neither a stream's first-token bound
// nor a queue wait's bound refuses anyone (docs/design.md, the hang
// window); the queue's size and bytes still bound what is held.
func (l *Limiter) holdingLocked(now time.Time) bool {
	return l.suspected || l.recovering || (!l.slowFrom.IsZero() && now.Sub(l.slowFrom) < l.cfg.SlowStart)
}

// markHeldLocked marks w held when the engine is (holdingLocked), and
// whether for a suspicion alone: a suspicion cleared as false takes that
// back (SetSuspected), since the engine was healthy and its pace judges
// the wait again; a recovery's or a slow start's hold stays.
func (l *Limiter) markHeldLocked(now time.Time, w *waiter) {
	if !l.holdingLocked(now) || (w.held && !w.bySuspicion) {
		return
	}
	w.held = true
	w.bySuspicion = !l.recovering && (l.slowFrom.IsZero() || now.Sub(l.slowFrom) >= l.cfg.SlowStart)
}

// queueWaitFor bounds a request's queue wait by max_queue_wait and by its
// client's own timeout when known (clientTimeout, 0: none). Half of it,
// usually: waiting out the whole timeout in the queue leaves no time to
// generate, and the attempt turns into a retry anyway. A coalesced keyed
// call loses nothing by waiting longer: its queue place and its execution
// both outlive the attempt, so the retry resumes either; it waits up to
// keyedWaitShare of the timeout, then is told when to come back
// (Retry-After) while its place is held.
func (l *Limiter) queueWaitFor(clientTimeout time.Duration, coalesced bool) time.Duration {
	d := l.cfg.MaxQueueWait
	if clientTimeout > 0 {
		share := 0.5
		if coalesced {
			share = keyedWaitShare
		}
		d = min(d, time.Duration(share*float64(clientTimeout)))
	}
	return max(d, time.Millisecond)
}

// undoLocked refunds the quota charges of a request that got no slot.
func (l *Limiter) undoLocked(now time.Time, lis *Listener) {
	if lis.tenant != nil {
		lis.tenant.refund(now, lis.tokens)
	}
	if lis.retry {
		l.budget.give(now)
	}
}

// estimatedWaitLocked is how long until ahead requests have completed at
// the measured completion rate: the honest Retry-After.
func (l *Limiter) estimatedWaitLocked(now time.Time, ahead int) time.Duration {
	rate := l.completionRateLocked(now)
	if rate <= 0 {
		return unknownWait
	}
	return time.Duration(float64(ahead+1) / rate * float64(time.Second))
}

// completionRateLocked is answers finished a second, at the engine's pace
// (eventRate).
func (l *Limiter) completionRateLocked(now time.Time) float64 {
	return l.completions.perSecond(now, completionSpan, l.busySince)
}

// addInFlightLocked changes the requests in flight by d at now, keeping
// their integral over time.
func (l *Limiter) addInFlightLocked(now time.Time, d int) {
	if !l.inFlightSince.IsZero() && now.After(l.inFlightSince) {
		l.inFlightArea += float64(l.inFlight) * now.Sub(l.inFlightSince).Seconds()
	}
	l.inFlightSince = now
	if l.inFlight == 0 && d > 0 {
		l.busySince = now
	}
	l.inFlight += d
}

// meanInFlightLocked is the mean number of requests in flight from a
// listener's admission to now, itself included; the count at admission
// when no time has passed.
func (l *Limiter) meanInFlightLocked(lis *Listener, now time.Time) int {
	d := now.Sub(lis.admitted).Seconds()
	if d <= 0 {
		return lis.inFlightAt
	}
	area := l.inFlightArea
	if now.After(l.inFlightSince) {
		area += float64(l.inFlight) * now.Sub(l.inFlightSince).Seconds()
	}
	return int(math.Round((area - lis.areaAt) / d))
}
