package core

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
)

const (
	// giveUpSamples: the learned timeout of a route is the median of its
	// clients' last give-ups, from giveUpMin of them on. The median, so a
	// user who cancels early (or a client with a longer timeout) does not
	// move it.
	giveUpSamples = 16
	giveUpMin     = 3
	// maxLearnedRoutes bounds the routes learned (paths are the client's
	// choice); past it, new routes are not learned.
	maxLearnedRoutes = 256
	// defaultStreamWait bounds a stream's queue wait when neither
	// stream_queue_wait nor ttft_target is set: about as long as a person
	// waits for a first word before giving up.
	defaultStreamWait = 10 * time.Second
	// autoStreamPatience bounds, with ttft_target: auto, the queue wait
	// plus first token of a stream whose client announced no timeout but
	// has shown patience (a retry, or a route whose clients come back;
	// see streamQueueWaitLocked), the objective when longer: a chat
	// user's patience, the 2 s the objective's default was before auto.
	autoStreamPatience = 2 * time.Second
	// comebackWeight is the weight of each stream turned away, or come
	// back for, in a route's comeback share (an exponential average over
	// about the last 16 of these events; events, not seconds, so it
	// learns as fast on a fast engine as on a slow one).
	comebackWeight = 1.0 / 16
	// ttftWeight is the weight of each new first token in engineTTFT
	// (an exponential average over about the last ten).
	ttftWeight = 0.1
)

// deadlines infers a client's timeout when its request announces none:
// the tenant's configured client_timeout, else the route's
// (client_timeouts), else the route's learned one (under Limiter.mu).
type deadlines struct {
	routes  map[string]time.Duration
	learned map[string]*giveUps
	// returns is, per route, whether the clients of streams it turned
	// away came back for them (patience, see streamQueueWaitLocked).
	returns map[string]*comebacks
}

func newDeadlines(cfg []configs.RouteTimeout) *deadlines {
	d := &deadlines{routes: map[string]time.Duration{}, learned: map[string]*giveUps{}, returns: map[string]*comebacks{}}
	for _, rt := range cfg {
		d.routes[rt.Path] = rt.Timeout
	}
	return d
}

// giveUps is a ring of the times after which a route's clients gave up.
type giveUps struct{ durationRing }

func newGiveUps() *giveUps { return &giveUps{newDurationRing(giveUpSamples)} }

// median is the learned timeout, 0 while fewer than giveUpMin are known.
func (g *giveUps) median() time.Duration {
	if g == nil || g.n < giveUpMin {
		return 0
	}
	return g.quantile(1, 2)
}

// infer is the timeout assumed for a request of route from a tenant whose
// configured client_timeout is tenantTimeout (0: none); 0 when unknown.
func (d *deadlines) infer(route string, tenantTimeout time.Duration) time.Duration {
	if tenantTimeout > 0 {
		return tenantTimeout
	}
	if t, ok := d.routes[route]; ok {
		return t
	}
	return d.learned[route].median()
}

// gaveUp records that a client of route left after waiting `after` for
// an answer that had not begun: its timeout, most likely. It returns the
// route's learned timeout before and after.
func (d *deadlines) gaveUp(route string, after time.Duration) (before, now time.Duration) {
	g := d.learned[route]
	if after <= 0 {
		return g.median(), g.median()
	}
	if g == nil {
		if len(d.learned) >= maxLearnedRoutes {
			return 0, 0
		}
		g = newGiveUps()
		d.learned[route] = g
	}
	before = g.median()
	g.add(after)
	return before, g.median()
}

// comebacks weighs a route's streams turned away (by their queue bound)
// against retries of streams that never got an execution: both
// exponential averages over the same events, so back/turned is the share
// of turned-away streams whose clients asked again. The route reads as
// patient from half of them on, and stops at a third: a share near one
// threshold does not flip it (and its log line) at every event.
type comebacks struct {
	turned, back float64
	patient      bool
}

func (c *comebacks) isPatient() bool { return c != nil && c.patient }

// comebacksOf is the route's comebacks, nil past maxLearnedRoutes.
func (d *deadlines) comebacksOf(route string) *comebacks {
	c := d.returns[route]
	if c == nil && len(d.returns) < maxLearnedRoutes {
		c = &comebacks{}
		d.returns[route] = c
	}
	return c
}

// streamSeen records a stream of route turned away (back false) or come
// back for (back true); it reports whether the route's clients read as
// patient before and after.
func (d *deadlines) streamSeen(route string, back bool) (before, now bool) {
	c := d.comebacksOf(route)
	if c == nil {
		return false, false
	}
	before = c.patient
	c.turned *= 1 - comebackWeight
	c.back *= 1 - comebackWeight
	if back {
		c.back += comebackWeight
	} else {
		c.turned += comebackWeight
	}
	switch {
	case !c.patient && c.back > 0 && 2*c.back >= c.turned:
		c.patient = true
	case c.patient && 3*c.back < c.turned:
		c.patient = false
	}
	return before, c.patient
}

// noteStreamLocked records, for a stream whose client announced no
// timeout, that it was turned away by its bound (turnedAway) or that it is
// a retry of a call never executed here (its client came back); it logs
// when the route's clients start or stop reading as patient.
func (l *Limiter) noteStreamLocked(r Request, turnedAway bool) {
	if !r.Stream || r.Timeout > 0 || !l.cfg.TTFTTarget.IsAuto() {
		return
	}
	if !turnedAway && !(r.Retry && r.NeverExecuted) {
		return
	}
	before, now := l.deadlines.streamSeen(r.Route, !turnedAway)
	if before != now {
		msg := "admission: the clients of a route come back for streams turned away; its streams now wait up to a person's patience"
		if !now {
			msg = "admission: the clients of a route no longer come back for streams turned away; its streams now wait up to the objective"
		}
		l.log.WithFields(logrus.Fields{"route": r.Route, "patience_seconds": autoStreamPatience.Seconds()}).Info(msg)
	}
}

// clientTimeout is the configured client_timeout of a key (listed, else
// the default's); 0: none.
func (t *tenantTable) clientTimeout(hash string) time.Duration {
	if e, ok := t.listed[hash]; ok {
		return e.ClientTimeout
	}
	return t.def.ClientTimeout
}

// GaveUp reports that a client of route (a request without an announced
// timeout) left after waiting `after` for an answer that had not begun:
// queued, or waiting for the engine's first byte. For a keyed call the
// transport reports it once a retry of the same call confirms the client
// timed out (rather than cancelled). The route's clients' timeout is
// learned from these (the median of the last 16, from 3 on) and used for
// its requests that announce none, as an announced one would be.
func (l *Limiter) GaveUp(route string, after time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	before, now := l.deadlines.gaveUp(route, after)
	if now != before && (before == 0 || now > before*6/5 || now < before*5/6) {
		l.log.WithFields(logrus.Fields{"route": route, "client_timeout_seconds": now.Seconds()}).
			Info("admission: learned the client timeout of a route from its clients giving up")
	}
}

// timeoutLocked is the client's timeout: announced, else inferred.
func (l *Limiter) timeoutLocked(r Request) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return l.deadlines.infer(r.Route, l.tenants.clientTimeout(r.Tenant))
}

// streamQueueWaitLocked bounds the queue wait of a stream r whose client
// announced no timeout: stream_queue_wait; else what ttft_target leaves
// once the engine's own time to first token (engineTTFT) is spent, at
// least a tenth of the target; else defaultStreamWait.
//
// The client sees the queue wait plus the engine's TTFT, so the wait gets
// only what the target leaves: bounded by the whole target, the queue
// doubled a TTFT the automatic cap held near the objective
// (docs/design.md, queue bounds).
func (l *Limiter) streamQueueWaitLocked(r Request) time.Duration {
	switch {
	case l.cfg.StreamQueueWait > 0:
		return l.cfg.StreamQueueWait
	case l.objectiveLocked() > 0:
		bound := l.objectiveLocked()
		if l.cfg.TTFTTarget.IsAuto() && (r.Retry || l.deadlines.returns[r.Route].isPatient()) {
			// A derived objective says what the engine can do, not what
			// the client will wait for. A stream is held to it unless its
			// client has shown patience: a late stream holds a seat and
			// KV cache that on-time ones need. A retry, or any stream of
			// a route whose turned-away streams mostly come back, waits
			// to a person's patience: held to the objective, clients
			// that come back anyway lose calls the engine would have
			// served. Figures: bench/README.md, "Figures once kept in
			// code comments", the stream's queue bound.
			bound = max(bound, autoStreamPatience)
		}
		return max(bound/10, bound-l.engineTTFT)
	}
	return defaultStreamWait
}

// maxWaitLocked is the longest r may wait in the queue: max_queue_wait,
// cut to part of its client's timeout (timeout: announced or inferred);
// for a stream whose client announced none, also its first token's worth
// (streamQueueWait).
func (l *Limiter) maxWaitLocked(r Request, timeout time.Duration) time.Duration {
	d := l.queueWaitFor(timeout, r.Coalesced)
	if r.Stream && r.Timeout <= 0 {
		d = min(d, l.streamQueueWaitLocked(r))
	}
	if !r.Stream && !r.Coalesced {
		d = max(d, l.plainWaitLocked(timeout))
	}
	return d
}

// plainWaitLocked is how long a plain call may wait and still get its
// answer within its client's timeout: the timeout less the leeway of its
// answer (answerLeewayLocked; 0 while either is unknown). Half the
// timeout, the bound before, wastes the other half where answers are
// short: at the end of a burst the queue then held half a timeout of work
// and the engine idled while calls it could still have answered had been
// told to come back (docs/design.md, the first second of a burst).
func (l *Limiter) plainWaitLocked(timeout time.Duration) time.Duration {
	leeway := l.answerLeewayLocked()
	if timeout <= 0 || leeway <= 0 {
		return 0
	}
	return min(l.cfg.MaxQueueWait, timeout-leeway)
}

// answerLeewayLocked is what a plain call's timeout must leave for its
// answer once a slot is its: the slow end of the engine's last answers
// (their 95th percentile) and a tenth of it more for the client's and
// vigil's own delays; while fewer than answersMin are measured (a vigil
// just restarted on the pace it kept), answerLeeway typical answers. Two
// typical answers, the leeway before, left a second of the timeout unused
// where answers take one at a full batch: at a burst's end the queue held
// too little work and the engine idled while its last calls' clients
// still waited (issue 41). Where answers vary in length their slow end
// leaves more than two typical ones, as it should: the long answers
// would miss the timeout.
func (l *Limiter) answerLeewayLocked() time.Duration {
	if l.answers.n < answersMin {
		return answerLeeway * l.engineService
	}
	return l.answers.quantile(95, 100) * 11 / 10
}

// answerLeeway typical answer times are left of a plain call's timeout
// for its answer until its slow end is measured (answerLeewayLocked): one
// would end half of the answers past it, their engine work lost with
// their clients.
const answerLeeway = 2

// answersMin answers measured judge the leeway of a plain call's answer
// by their slow end; answersKept are kept, the last ones.
const (
	answersMin  = 16
	answersKept = 64
)

// drainRateLocked is the queue's measured drain rate: admissions per
// second over the last completionSpan, or since the busy period began
// when that is shorter (at least a second), so a burst after a quiet
// spell is not read as a slow engine; over the busy period's last
// paceEvents admissions when the span holds fewer (a slow engine).
func (l *Limiter) drainRateLocked(now time.Time) float64 {
	span := min(completionSpan, max(time.Second, now.Sub(l.busySince)))
	return l.admissions.perSecond(now, span, l.busySince)
}

// positionLocked is how many live waiters the queue serves before r
// (placeholders aside): fifo, every one in front of it; newest_first, none
// for a first attempt (it is served next: the first attempts already
// waiting are older, and a newer arrival that overtakes it before a slot
// frees ends its wait at its bound, 503 then), every live waiter for a
// retry; a retry resuming a held place (ph) counts from there. Counting
// the older first attempts for a newest_first arrival would turn away the
// very streams newest_first serves on time (docs/design.md, queue bounds).
func (l *Limiter) positionLocked(r Request, ph *waiter) int {
	if ph != nil && ph.queued {
		return l.aheadLocked(ph)
	}
	if l.cfg.Order == "fifo" || r.Retry {
		return l.liveWaitersLocked()
	}
	return 0
}

// streamCheckLocked turns a stream away at once when the queue would not
// reach it within its bound at the measured drain rate: queued, it would
// only be answered 503 later, after its first token stopped being worth
// anything. With no admission measured, it queues while nobody is ahead.
func (l *Limiter) streamCheckLocked(now time.Time, r Request, ph *waiter, bound time.Duration) *Rejection {
	pos := l.positionLocked(r, ph)
	rate := l.drainRateLocked(now)
	if rate <= 0 && pos == 0 {
		return nil
	}
	if pos == 0 && now.Sub(l.busySince) < bound {
		// The busy period is younger than the stream's bound: the rate
		// counts its first admissions over a whole second (see
		// drainRateLocked) and reads a burst's start as a slow engine.
		// A stream served next waits at most its bound anyway; turned
		// away here, a fresh vigil answered 503 to streams of a burst
		// that the engine served in a step (a 500 ms objective).
		return nil
	}
	if rate > 0 && float64(pos+1)/rate <= bound.Seconds() {
		return nil
	}
	l.noteStreamLocked(r, true)
	return &Rejection{Reason: ReasonStreamDeadline, Wait: l.estimatedWaitLocked(now, pos),
		Message: "The engine is at capacity and the queue would not reach this stream before its first token " +
			"is due; retry after the indicated delay."}
}
