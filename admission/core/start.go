package core

import "time"

// Where the automatic cap starts and how fast it grows in a burst's first
// seconds (issue 41). A fixed start of 16 took about 3.4 s of x1.25 steps
// to reach an engine that runs 61 while calls arrived at twice what it
// could serve; each of those seconds fills vigil's queue with calls that
// then wait out half their clients' timeout. So the cap starts from what
// the engine tells (its seat limit where it exposes one, what vigil
// learned of it before its own restart: see learned.go), and grows, while
// probing, as fast as the engine proves it can take.
const (
	// burstGain multiplies the cap per probing window in which the engine
	// started everything it was sent: its queue gauge read empty while it
	// ran at least fullShare of the cap. That is the engine's own proof of
	// room for as much again; the first reading of its queue past that
	// brings the cap down to what it runs (the queue rule), so an
	// overshoot lasts one window.
	burstGain = 2.0
	// fullShare of the cap running at the engine reads as "it ran all of
	// it": requests in transit (admitted, not yet counted by the engine)
	// and answers that just ended make the gauge lag the cap.
	fullShare = 0.75
)

// startState is what the automatic cap knows of the engine beyond its
// windows of evidence: the seat limit the engine exposes (kept across the
// cap's reset: an engine restart, after which the transport reads the
// seats again), and the doubling the engine has not shown yet.
type startState struct {
	// seats is the most requests the engine runs at once as it says
	// itself (llama.cpp's /slots, i.e. --parallel), 0 while unknown.
	// Every request past it waits in the engine's own queue, so it is the
	// cap's ceiling as well as its best start. vLLM exports no such
	// figure (max_num_seqs is configured, not exported; engine_max_seqs
	// is the operator's word for it, which the prefill meter uses), and
	// SGLang's is not read yet.
	seats int
	// await is the cap a doubling set, until a reading of the engine
	// shows it holding most of it (running and waiting): a reading taken
	// before the requests it let in reached the engine still shows the
	// old cap, all running, nothing waiting, and doubled it again (the
	// simulated engine of 40 seats: 40, 80, 100, before the queue showed).
	await float64
	// held: this window's growth waits for that reading.
	held bool
	// pressed: a request found the cap full and had to queue since the
	// cap last changed. Filling the cap is not enough to double it: 16
	// clients fill a cap of 16 and need no more.
	pressed bool
	// overTold: the engine's gauges read more running than the seats the
	// operator configured (data-parallel ranks, each with max_num_seqs of
	// its own, or a wrong figure): they no longer bound the cap.
	overTold bool
}

// seatsSlack: the share of the configured seats (one at least) the cap may
// run past them. A data-parallel engine has max_num_seqs a rank, and its
// gauges, summed over the ranks, can only show it running more than the
// seats when the cap lets more in; the slack lets them show it at the cost
// of a few requests waiting a turnover in an engine that has no more.
const seatsSlack = 1.0 / 16

// kept is what survives the cap's reset.
func (s startState) kept() startState { return startState{seats: s.seats} }

// bound applies the exposed seat limit to a cap value.
func (s startState) bound(limit float64) float64 {
	if s.seats > 0 {
		return min(limit, float64(s.seats))
	}
	return limit
}

// toldSeats is how many requests the engine runs at once as it was told:
// the seat limit it exposes, else the operator's engine_max_seqs (its
// max_num_seqs, which vLLM does not export); 0 when neither.
func (a *autoLimit) toldSeats() int {
	if a.start.seats > 0 {
		return a.start.seats
	}
	return a.prefill.seats
}

// startLimit is where the cap starts, and starts again after the engine's
// restart: the engine's seats when told (all of them run at once, so the
// first second of a burst needs no probing to reach them), else
// autoInitial. A configured seat count bounds the cap only until the
// engine's gauges read more running (settle): they sum its data-parallel
// ranks, each with max_num_seqs of its own. Started at 16 beside the AI SDK's
// burst at twice what 64 seats serve, the cap took 3 s of the burst to
// reach them while 120 calls queued (bench/README.md, issue 41).
func (a *autoLimit) startLimit() float64 {
	if n := a.toldSeats(); n > 0 {
		return max(autoMin, min(autoMax, float64(n)))
	}
	return autoInitial
}

// seatsTaken reports whether the engine runs all the seats it was told
// (r running): an empty queue beside it proves no room, since every
// request past the seats waits in the engine's own queue (the cap doubled
// from 64 to 128 there, and 64 calls then waited out a whole answer in
// the engine, most past their clients' timeout). An engine that runs more
// than it was told has more seats than that (data-parallel ranks, each
// with the configured max_num_seqs): the told count says nothing then.
func (a *autoLimit) seatsTaken(r float64) bool {
	n := float64(a.toldSeats())
	return n > 0 && r >= seatsFull*n && r <= n
}

// probeGainFor is the growth factor of one probing window whose engine
// gauges averaged w waiting and r running (gauges: how many readings). An
// engine that started all of the cap with nothing waiting has shown room
// for more: the cap doubles, and grows again only once a reading shows
// the engine holding most of the doubled cap. Otherwise, or with no
// reading to go by, the gentle probeGain. The engine's seats, when told,
// bound the doubling, and an engine running all of them gets no growth
// but the step the law always allows (seatsTaken). Not over streams:
// their first tokens judge each growth a prefill later (see grow), and doubled
// past what the engine prefills in time the cap ran the fast engines of
// the goodput family at 31-50 in flight against 26 (0.2-0.8x the best
// fixed cap against 0.5-1.3x, same machine and load: bench/README.md,
// issue 41).
func (a *autoLimit) probeGainFor(w, r float64, gauges int) float64 {
	if a.start.await > 0 {
		if gauges == 0 || r+w < fullShare*a.start.await {
			a.start.held = true
			return 1
		}
		a.start.await = 0
	}
	if a.seatsTaken(r) {
		return 1
	}
	if gauges > 0 && w == 0 && r >= fullShare*a.limit && !a.streams && a.start.pressed {
		gain := burstGain
		if n := float64(a.toldSeats()); n > 0 && r <= n {
			// Up to the seats, not past them: past them only the
			// gauges tell whether more runs (data-parallel ranks).
			if a.limit >= n {
				return probeGain
			}
			gain = min(gain, n/a.limit)
		}
		a.start.await = a.limit * gain
		return gain
	}
	return probeGain
}

// settle ends a window's change of the cap (from old): no growth while a
// doubling waits for the engine to show it, and never past the seats: the
// ones the engine exposes, or, by seatsSlack at most, those configured
// until the engine is seen running more. Past them every request waits in
// the engine's own queue for a whole answer to free a seat: the cap grew
// by a quarter from 64 to 80 whenever a window read a batch between two
// turnovers, and the 16 then waited out a turnover in the engine, many
// past their clients' timeout.
func (a *autoLimit) settle(old float64) {
	if a.limit != old {
		a.start.pressed = false
	}
	if a.start.held {
		a.limit = min(a.limit, old)
		a.start.held = false
	}
	if !a.probing {
		a.start.await = 0
	}
	if n := float64(a.prefill.seats); n > 0 && a.start.seats == 0 {
		if a.gauges > 0 && a.running/float64(a.gauges) > n {
			a.start.overTold = true
		}
		if !a.start.overTold {
			a.limit = min(a.limit, n+max(1, n*seatsSlack))
		}
	}
	a.limit = a.start.bound(a.limit)
}

// queuedPastCapLocked tells the automatic cap that a request found it full
// and queues (the cap's own demand counts filling it too).
func (l *Limiter) queuedPastCapLocked(now time.Time) {
	if a, ok := l.limitLocked().(*autoLimit); ok && l.inFlight >= l.capLocked(now) {
		a.start.pressed = true
	}
}

// SeatTaker is a Limit that takes the engine's own seat limit.
type SeatTaker interface {
	// OnSeats: the engine runs at most n requests at once (n > 0), as it
	// says itself.
	OnSeats(n int, now time.Time) bool
}

var _ SeatTaker = (*autoLimit)(nil)

// OnSeats sets the exposed seat limit: the cap's ceiling from now on, and
// its value while it is still probing for the engine's capacity (the
// engine told it; probing would only overshoot it and come back).
func (a *autoLimit) OnSeats(n int, now time.Time) bool {
	if n <= 0 || n == a.start.seats {
		return false
	}
	old := a.cap()
	a.start.seats = n
	next := a.start.bound(a.limit)
	if a.probing {
		next = float64(n)
	}
	// The engine's word over autoMin: one that runs one request at a
	// time queues the second.
	next = a.start.bound(max(autoMin, min(autoMax, next)))
	if next != a.limit {
		a.limit = next
		a.lastChange = now
		a.demand = false
		a.ttfts = a.ttfts[:0]
	}
	return a.cap() != old
}

// SetEngineSeats tells the automatic cap how many requests the engine
// runs at once, as the engine itself says (llama.cpp's /slots); n <= 0 is
// ignored. A fixed cap is the operator's and is left alone.
func (l *Limiter) SetEngineSeats(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.auto.(SeatTaker)
	if !ok || n <= 0 {
		return
	}
	now := l.clock.Now()
	if s.OnSeats(n, now) && l.fixed == 0 {
		l.log.WithField("seats", n).WithField("cap", l.capLocked(now)).
			Info("admission: the automatic cap takes the engine's seat limit")
		l.dispatchLocked(now)
	}
}
