package enginesim

import (
	"slices"
	"time"
)

// Admission is an admission policy in front of one engine rank, for
// Deliver: how many calls it lets the engine hold, when it gives up on a
// call, and which waiting call it sends first.
type Admission struct {
	// Seats is how many calls the engine holds at once (running plus
	// waiting); the admission sends a call only below it. 0: no admission,
	// every call goes to the engine when it arrives (straight at the
	// engine, whose own FCFS queue then holds the excess).
	Seats int
	// Margin is how much of its time a call must have left to be sent: a
	// call that arrived at a with the clients' timeout T is sent at now
	// only if a+T-Margin >= now; one past that is dropped (answered at
	// once, never sent). A call whose deadline passes while it waits is
	// gone either way: its client left. Not negative.
	Margin time.Duration
	// LateMargin replaces Margin from engine time LateFrom on, when
	// LateFrom > 0: in a burst's tail the batch thins and answers come
	// sooner, so a call with less time left can still be answered.
	LateMargin, LateFrom time.Duration
	// NewestFirst sends the latest arrival first among the waiting calls;
	// otherwise the oldest (with one timeout for every call, the one with
	// the earliest deadline).
	NewestFirst bool
}

// Deliver returns how many of the calls of w arriving at arrivals (engine
// time) an engine with cfg completes within timeout of each call's
// arrival, behind admission a. The timeout covers the whole call, as an
// AI SDK abort does: a call sent but unfinished at its deadline does not
// count, and its client disconnects there (with cfg.AbortOnDisconnect the
// engine drops it, otherwise it runs to its end for nobody); an answer
// counts only if its last token is out by the deadline.
//
// Like MeasureCapacity it drives the scheduler offline (no sleeping, no
// HTTP), step by step, so it is exact and fast; it models one rank. The
// admission sees every arrival, completion and deadline the moment it
// happens and sends at the start of the next step, which is when the engine
// would see the call anyway: no admission can send sooner.
func Deliver(cfg Config, w Workload, arrivals []time.Duration, timeout time.Duration, a Admission) int {
	at := slices.Clone(arrivals)
	slices.Sort(at)
	return deliver(cfg, w, at, timeout, a, newMetrics(cfg))
}

// deliver is Deliver on sorted arrivals, with series the scheduler writes
// and nobody reads (a sweep shares one set: building it costs more than
// a short burst).
func deliver(cfg Config, w Workload, at []time.Duration, timeout time.Duration, a Admission, m *metrics) int {
	s := newSched(cfg, m)
	var (
		now       time.Duration
		next      int             // the next arrival not yet seen
		pending   []time.Duration // arrived, not sent: arrival times, oldest first
		sent      []*request      // at the engine, unfinished
		delivered int
	)
	send := func(arrival time.Duration) {
		r := newRequest("", w.PromptTokens, w.PrefixTokens, "shared", w.OutputTokens, reasonStop)
		r.arrival = arrival
		s.add(r)
		sent = append(sent, r)
	}
	for {
		for next < len(at) && at[next] <= now {
			if a.Seats == 0 {
				send(at[next])
			} else {
				pending = append(pending, at[next])
			}
			next++
		}
		// Clients whose deadline came left; the engine sees it now.
		for _, r := range sent {
			if cfg.AbortOnDisconnect && r.arrival+timeout <= now && r.state != stateDone && !r.aborted {
				s.abort(r, now)
			}
		}
		// Pending calls are in arrival order, so with one timeout those
		// past their deadline (or too near it to be sent) lead.
		margin := a.Margin
		if a.LateFrom > 0 && now >= a.LateFrom {
			margin = a.LateMargin
		}
		for len(pending) > 0 && (pending[0]+timeout <= now || pending[0]+timeout-margin < now) {
			pending = pending[1:]
		}
		for len(pending) > 0 && len(s.running)+len(s.waiting) < a.Seats {
			if a.NewestFirst {
				send(pending[len(pending)-1])
				pending = pending[:len(pending)-1]
			} else {
				send(pending[0])
				pending = pending[1:]
			}
		}
		if s.idle() {
			// Nothing at the engine, so nothing waits in front either
			// (there were seats): on to the next arrival.
			if next == len(at) {
				return delivered
			}
			now = max(now, at[next])
			continue
		}
		b := s.schedule(now)
		if len(b.entries) == 0 {
			// Nothing runnable (a request too large for the KV cache):
			// nothing more will finish.
			return delivered
		}
		now += s.cost(b)
		s.complete(b, now)
		kept := sent[:0]
		for _, r := range sent {
			if r.state != stateDone {
				kept = append(kept, r)
				continue
			}
			if _, _, reason := r.snapshot(); reason != reasonAbort && now <= r.arrival+timeout {
				delivered++
			}
		}
		clear(sent[len(kept):])
		sent = kept
	}
}

// BestDelivered is what the best of a family of clairvoyant admissions
// delivers of the calls of w arriving at arrivals (engine time) with the
// clients' timeout covering the whole call, and the admission that does
// it. Every member knows each call's deadline, keeps the engine's queue
// empty (sends only while running plus waiting are below MaxNumSeqs), drops
// the calls too near their deadline (Admission.Margin, and a LateMargin
// in the tail once the arrivals are over) and sends the others oldest or
// newest first.
//
// The search, for each order: the margin every timeout/60 (100 ms of a 6
// s timeout) over 0..timeout, then every timeout/1200 (5 ms) within one
// coarse step of the best. Then, for the better order, a late margin
// below that one every timeout/24 (250 ms), from every timeout/24 between
// the last arrival and its deadline; the best refined to the fine step,
// and its start to a fifth of timeout/24.
//
// Its count is a lower bound on what any admission in front of this
// engine delivers: one that knew each answer's time, or gave up on calls
// in another order, could do better. An upper bound is the engine's work:
// each delivered call costs at least its share of a full batch's steps,
// so no more than capacity x (the last deadline - the first arrival) are
// answered in time. The most any scheduler can do lies between.
func BestDelivered(cfg Config, w Workload, arrivals []time.Duration, timeout time.Duration) (int, Admission) {
	if len(arrivals) == 0 {
		return 0, Admission{Seats: cfg.MaxNumSeqs}
	}
	at := slices.Clone(arrivals)
	slices.Sort(at)
	o := oracle{cfg: cfg, w: w, at: at, timeout: timeout, m: newMetrics(cfg), best: -1}
	coarse := max((timeout / 60).Round(time.Millisecond), time.Millisecond)
	fine := max((timeout / 1200).Round(time.Millisecond), time.Millisecond)
	margin := func(a *Admission) *time.Duration { return &a.Margin }
	for _, newest := range []bool{false, true} {
		a := Admission{Seats: cfg.MaxNumSeqs, NewestFirst: newest}
		o.refine(o.sweep(a, margin, 0, timeout, coarse), margin, coarse, fine, timeout)
	}
	// The tail: answers come sooner as the batch thins.
	early := o.bestA
	last := at[len(at)-1]
	step := max((timeout / 24).Round(time.Millisecond), time.Millisecond)
	late := func(a *Admission) *time.Duration { return &a.LateMargin }
	lateFrom := func(a *Admission) *time.Duration { return &a.LateFrom }
	bestN, bestA := -1, early
	for from := last + step; from < last+timeout; from += step {
		a := early
		a.LateFrom = from
		if n, a := o.sweepN(a, late, 0, early.Margin-coarse, step); n > bestN {
			bestN, bestA = n, a
		}
	}
	if bestN >= 0 {
		a := o.refine(o.refine(bestA, late, step, coarse, early.Margin-fine), late, coarse, fine, early.Margin-fine)
		o.refine(a, lateFrom, step, step/5, last+timeout)
	}
	return o.best, o.bestA
}

// oracle is BestDelivered's search: the calls, and the best admission
// found so far (ties to the first found: the simpler, the smaller
// margin, oldest first).
type oracle struct {
	cfg     Config
	w       Workload
	at      []time.Duration
	timeout time.Duration
	m       *metrics
	best    int
	bestA   Admission
}

// sweepN tries a with field every step over lo..hi and returns the best.
func (o *oracle) sweepN(a Admission, field func(*Admission) *time.Duration, lo, hi, step time.Duration) (int, Admission) {
	best, bestA := -1, a
	for v := lo; v <= hi; v += step {
		*field(&a) = v
		n := deliver(o.cfg, o.w, o.at, o.timeout, a, o.m)
		if n > best {
			best, bestA = n, a
		}
		if n > o.best {
			o.best, o.bestA = n, a
		}
	}
	return best, bestA
}

// sweep is sweepN's admission.
func (o *oracle) sweep(a Admission, field func(*Admission) *time.Duration, lo, hi, step time.Duration) Admission {
	_, a = o.sweepN(a, field, lo, hi, step)
	return a
}

// refine tries a's field every fine step within one coarse step of its
// value, up to hi, and returns the best.
func (o *oracle) refine(a Admission, field func(*Admission) *time.Duration, coarse, fine, hi time.Duration) Admission {
	v := *field(&a)
	return o.sweep(a, field, max(0, v-coarse+fine), min(hi, v+coarse-fine), fine)
}
