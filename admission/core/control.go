package core

import (
	"slices"
	"time"

	"github.com/sirupsen/logrus"
)

// SetSaturated is the watchdog's verdict that the engine is saturated
// (progressing under a deep queue of its own). While it holds, a fixed cap
// admits only 3/4 of itself; the automatic cap is cut by 1/4 once and does
// not grow. Requests over the cap wait in the bounded queue and are turned
// away when it is full or their wait expires.
func (l *Limiter) SetSaturated(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on == l.saturated {
		return
	}
	now := l.clock.Now()
	l.saturated = on
	l.limitLocked().SetSaturated(on, now)
	l.log.WithFields(logrus.Fields{"saturated": on, "cap": l.capLocked(now)}).Info("admission: engine saturation changed")
	l.dispatchLocked(now)
}

// SetRecovering marks the engine as being recovered (hung or down, being
// restarted): nothing goes to it until it is cleared. Nobody is refused
// for it: new requests and the queued ones wait in the queue (within its
// size and bytes, and their clients' timeouts) for the restarted engine,
// unless the transport diverts them to a peer first (Divert). Held places
// of keyed calls are dropped: the engine they waited for is gone.
// The calls queued now go first once the engine is back, oldest first
// (nextWaiterLocked). Clearing it does not start a slow start by itself: the recovery calls
// SlowStart once the engine is back, and a recovery that failed leaves
// the cap as it was.
func (l *Limiter) SetRecovering(on bool) {
	l.mu.Lock()
	if on == l.recovering {
		l.mu.Unlock()
		return
	}
	now := l.clock.Now()
	l.recovering = on
	if on {
		l.verdictAt = now
		for e := l.waiters.Front(); e != nil; {
			next := e.Next()
			w := e.Value.(*waiter)
			w.bySuspicion = false // the hang held it: held for good
			w.atVerdict = true
			if w.placeholder {
				l.removeWaiterLocked(e)
			}
			e = next
		}
	} else {
		l.dispatchLocked(now)
	}
	l.mu.Unlock()
	l.log.WithField("recovering", on).Info("admission: engine recovery changed")
}

// SetSuspected marks the engine as suspected stalled (package admission's
// stall watch) or clears it. While it holds nobody is refused for the
// engine's silence (no stream deadline, no queue timeout; see
// holdingLocked), and, with stop, nothing new goes to the engine: requests
// queue, for Divert to hand to a peer. Without a peer to take them a
// suspicion stops nothing: a call sent into a hung engine is cut and held
// at the verdict as one held here would be, and one sent to a healthy
// engine the suspicion misjudged is served. Clearing it hands the queue
// the slots free, and, unless the engine is being recovered (the verdict
// confirmed the suspicion), gives the waits held for it alone back their
// bounds: the engine progressed, so its pace judges them again, and a
// suspicion misjudged costs nothing past its own seconds.
func (l *Limiter) SetSuspected(on, stop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	stop = on && stop
	if on == l.suspected && stop == l.suspectStop {
		return
	}
	if !on && l.suspected && !l.recovering {
		now := l.clock.Now()
		for e := l.waiters.Front(); e != nil; e = e.Next() {
			if w := e.Value.(*waiter); w.bySuspicion {
				w.held, w.bySuspicion = false, false
				w.fresh = now.Add(w.deadline.Sub(w.since))
			}
		}
	}
	l.suspected, l.suspectStop = on, stop
	if !stop {
		l.dispatchLocked(l.clock.Now())
	}
}

// Holding reports whether the engine is held: suspected stalled, being
// recovered, or ramping after a restart (nobody is refused for it then).
func (l *Limiter) Holding() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holdingLocked(l.clock.Now())
}

// Divert takes every queued request out of the queue (but those marked
// Undivertible) and ends its Acquire with ErrDiverted, for the transport
// to send elsewhere; it returns how many. Only while the engine is
// suspected or being recovered: otherwise the queue is served here.
func (l *Limiter) Divert() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.suspectStop && !l.recovering {
		return 0
	}
	n := 0
	for e := l.waiters.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); !w.placeholder && !w.undivertible {
			l.removeWaiterLocked(e)
			w.ch <- waitResult{divert: true}
			n++
		}
		e = next
	}
	return n
}

// HoldBytes counts n bytes of request bodies held outside the queue (calls
// cut from a lost engine, waiting for it) against max_queue_bytes; a
// negative n gives them back.
func (l *Limiter) HoldBytes(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queuedBytes += n
}

// SlowStart ramps the cap from 10% back to full over the configured
// slow_start, for an engine that just came back. The automatic cap also
// forgets its evidence (a restarted engine may differ) and probes again from
// at least its initial value.
func (l *Limiter) SlowStart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if l.cfg.SlowStart > 0 {
		l.slowFrom = now
	}
	if p, ok := l.auto.(Prober); ok {
		p.Restart(now)
	}
	l.log.WithFields(logrus.Fields{"slow_start_seconds": l.cfg.SlowStart.Seconds(), "cap": l.capLocked(now)}).
		Info("admission: slow start")
}

// SetMaxInFlight sets a fixed cap (n > 0) or returns to the automatic one
// (n == 0); overrides use it and restore the old value at expiry. The cap
// taking over is told whether the engine is saturated.
func (l *Limiter) SetMaxInFlight(n int) {
	if n < 0 {
		n = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.fixed = n
	if n > 0 {
		l.fixedCap = NewFixed(n, l.cfg.EngineMaxSeqs)
	}
	l.limitLocked().SetSaturated(l.saturated, now)
	l.log.WithFields(logrus.Fields{"max_in_flight": n, "cap": l.capLocked(now)}).Info("admission: max_in_flight set")
	l.dispatchLocked(now)
}

// MaxInFlight is the configured cap: the fixed value, or 0 for automatic
// (Stats.Cap is the cap in force).
func (l *Limiter) MaxInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fixed
}

// ReadsEngine reports whether the engine's load is wanted now: requests
// are in flight (an idle engine is left alone) and the automatic cap is in
// force, or a fixed cap is under a saturated verdict (it then tells a
// prefill backlog from a full engine).
func (l *Limiter) ReadsEngine() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return (l.fixed == 0 || l.saturated) && l.inFlight > 0
}

// ObserveEngine feeds one reading of the engine's load to the cap in force.
func (l *Limiter) ObserveEngine(g EngineLoad) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.engineWaiting, l.engineRunning = g.Waiting, g.Running
	lim := l.limitLocked()
	er, ok := lim.(EngineReader)
	if !ok {
		return
	}
	if now := l.clock.Now(); er.OnEngine(g, now) {
		l.log.WithFields(logrus.Fields{"cap": lim.Limit(), "engine_waiting": g.Waiting, "engine_running": g.Running}).
			Debug("admission: cap changed")
		l.dispatchLocked(now)
	}
}

// Stats is a snapshot of the core's decisions and what it holds.
type Stats struct {
	// Admitted counts requests given a slot; Queued those that waited for
	// one; Abandoned those whose client left while waiting.
	Admitted, Queued, Abandoned uint64
	// QueueDepth counts live waiters; QueueHeld the places held for keyed
	// calls whose attempt ended; OldestQueued is the oldest waiter's age.
	QueueDepth, QueueHeld int
	OldestQueued          time.Duration
	InFlight              int
	// Cap is the cap in force (after slow start and saturation);
	// Automatic: max_in_flight 0.
	Cap       int
	Automatic bool
	// FirstTokenLimit bounds the streams awaiting their first token
	// (AwaitingFirstToken) at once; 0: no such limit.
	FirstTokenLimit, AwaitingFirstToken int
	// TTFTObjective is the TTFT objective in force (ttft_target, or the
	// one auto derived from the engine); 0: none.
	TTFTObjective                    time.Duration
	Saturated, Recovering, SlowStart bool
	// Suspected: the engine is suspected stalled (SetSuspected).
	Suspected bool
	// HeldWaits counts queue waits that reached their bound while the
	// engine was held (suspected, recovered, ramping) and went on instead
	// of being refused.
	HeldWaits uint64
	// CompletionRate: answers finished per second over the last 10 s.
	CompletionRate float64
	// EngineWaiting and EngineRunning: the engine's gauges as last read
	// (-1: never).
	EngineWaiting, EngineRunning float64
	// ServiceBaseline is the automatic cap's minimum service time of
	// answers (its knee's baseline; 0: not learned or another Limit).
	ServiceBaseline time.Duration
	// Service is its latest estimate of the mean service time (0: none).
	Service time.Duration
	// ServiceKneeApplies: the knee (3x ServiceBaseline) judges the cap
	// by Service. False while Service is an estimate of streams under a
	// TTFT objective, whose first tokens judge the cap instead.
	ServiceKneeApplies bool
	// LearnedTimeouts are the client timeouts learned per route from
	// clients giving up (see GaveUp), for requests that announce none.
	LearnedTimeouts map[string]time.Duration
	// PatientRoutes are the routes whose clients come back for the streams
	// turned away (under ttft_target auto, their streams wait up to a
	// person's patience), sorted.
	PatientRoutes []string
}

// Stats returns a snapshot.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	// The counters under the lock too, so they agree with the queue read
	// beside them (a waiter gone is a waiter counted).
	s := Stats{Admitted: l.admitted.Load(), Queued: l.queued.Load(), Abandoned: l.abandoned.Load()}
	now := l.clock.Now()
	s.QueueDepth, s.QueueHeld = l.liveWaitersLocked(), len(l.held)
	if e := l.nextOldestLocked(); e != nil {
		s.OldestQueued = now.Sub(e.Value.(*waiter).at)
	}
	s.InFlight = l.inFlight
	s.Cap = l.capLocked(now)
	s.Automatic = l.fixed == 0
	s.FirstTokenLimit, s.AwaitingFirstToken = l.firstTokenLimitLocked(), l.awaitingFirst
	s.TTFTObjective = l.objectiveLocked()
	s.Saturated, s.Recovering, s.SlowStart = l.saturated, l.recovering, !l.slowFrom.IsZero()
	s.Suspected, s.HeldWaits = l.suspected, l.heldWaits
	s.CompletionRate = l.completionRateLocked(now)
	s.EngineWaiting, s.EngineRunning = l.engineWaiting, l.engineRunning
	for route, g := range l.deadlines.learned {
		if d := g.median(); d > 0 {
			if s.LearnedTimeouts == nil {
				s.LearnedTimeouts = map[string]time.Duration{}
			}
			s.LearnedTimeouts[route] = d
		}
	}
	for route, c := range l.deadlines.returns {
		if c.patient {
			s.PatientRoutes = append(s.PatientRoutes, route)
		}
	}
	slices.Sort(s.PatientRoutes)
	if a, ok := l.auto.(*autoLimit); ok {
		s.ServiceBaseline = time.Duration(a.svcMin * float64(time.Second))
		s.Service = time.Duration(a.svc * float64(time.Second))
		s.ServiceKneeApplies = a.kneeJudges()
	}
	return s
}
