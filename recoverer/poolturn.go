package recoverer

import (
	"context"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/humanize"
)

// Pool coordination (pool.coordination: etcd): a recovery takes the pool's
// turn before it drains and gives it back once the host is back in
// rotation, so at most max_concurrent_recoveries members are out at once,
// whatever number of load balancers the pool has.

// poolGate is the pool's part of the guards: the capacity floor, then the
// pool's turn with a coordinator, else the load balancer's pool lock. stop
// is set when vigil is stopping: nothing to refuse, nothing to page.
func (r *Recovery) poolGate(ctx context.Context, lb balancer.State) (ref *recovery.Refusal, stop bool) {
	if r.o.Floor != nil {
		if err := r.o.Floor(ctx); err != nil {
			return &recovery.Refusal{Guard: recovery.GuardCapacityFloor, Reason: "not draining: " + err.Error()}, false
		}
	}
	if r.o.Coordinator == nil || r.o.DryRun {
		return r.poolRefusal(ctx, lb), false
	}
	r.mu.Lock()
	inc := r.j.Incident
	r.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, r.o.TurnWait)
	defer cancel()
	behind := ""
	h, err := r.o.Coordinator.Acquire(wctx, inc, func(holders string) {
		if holders != behind {
			behind = holders
			r.report(recovery.Step{Name: recovery.StepTurn, OK: true, Detail: "waiting for the pool's turn to recover: " + holders +
				"; the host still takes traffic"})
		}
	})
	switch {
	case err == nil:
		// The floor was read before the wait, which may have lasted
		// minutes while other members hung or left: read it again.
		if r.o.Floor != nil {
			if ferr := r.o.Floor(ctx); ferr != nil {
				if rerr := h.Release(context.WithoutCancel(ctx)); rerr != nil {
					r.log.WithError(rerr).Warn("could not give the pool's turn back; it expires with its lease")
				}
				return &recovery.Refusal{Guard: recovery.GuardCapacityFloor,
					Reason: "not draining: " + ferr.Error() + " (read again once the pool's turn came; the turn given back)"}, false
			}
		}
		r.takeTurn(h, "took the pool's turn to recover")
		return nil, false
	case ctx.Err() != nil:
		return nil, true
	case wctx.Err() != nil:
		return &recovery.Refusal{Guard: recovery.GuardCoordinator, Reason: fmt.Sprintf(
			"still waiting for the pool's turn after %s: %s holds it", humanize.GoTenths(r.o.TurnWait), behind)}, false
	case r.o.DrainWithoutCoordinator:
		r.report(recovery.Step{Name: recovery.StepTurn, Err: err.Error(), Detail: "draining on the load balancer's pool guard alone " +
			"because pool.drain_without_coordinator is set"})
		return r.poolRefusal(ctx, lb), false
	}
	return &recovery.Refusal{Guard: recovery.GuardCoordinator, Reason: "cannot take the pool's turn (" + err.Error() + "); " +
		"not draining on this vigil's own say-so (pool.drain_without_coordinator is off), still watching"}, false
}

// hasTurn reports a turn held: the load balancer's pool lock is then moot
// (the turn is the lock, and more than one member may hold one).
func (r *Recovery) hasTurn() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.turn != nil
}

// resumeTurn takes back the turn a previous vigil journaled before it
// continues that recovery. A turn that expired is asked for again while
// the host is still out of rotation; if that fails too the recovery goes
// on (putting the host back only adds capacity) and says so.
func (r *Recovery) resumeTurn(ctx context.Context) {
	r.mu.Lock()
	t, have, inc := r.j.Turn, r.turn != nil, r.j.Incident
	r.mu.Unlock()
	if r.o.Coordinator == nil || have {
		return
	}
	if t != nil {
		h, err := r.o.Coordinator.Resume(ctx, *t)
		if err == nil {
			r.mu.Lock()
			r.turn = h
			r.mu.Unlock()
			r.report(recovery.Step{Name: recovery.StepTurn, OK: true, Detail: "took back the pool's turn held before vigil stopped (" + t.Key + ")"})
			return
		}
		r.log.WithError(err).WithField("key", t.Key).Warn("the journaled pool turn is gone")
		r.update(func(j *Journal) { j.Turn = nil })
	}
	if !r.drained() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, r.o.TurnWait)
	defer cancel()
	h, err := r.o.Coordinator.Acquire(wctx, inc, nil)
	if err != nil {
		if ctx.Err() == nil {
			r.report(recovery.Step{Name: recovery.StepTurn, Err: err.Error(), Detail: "finishing the recovery of this drained host without the pool's turn"})
		}
		return
	}
	r.takeTurn(h, "took the pool's turn again to finish the recovery")
}

// takeTurn holds h, journals it so a restarted vigil takes it back, and
// reports it as what (the key appended).
func (r *Recovery) takeTurn(h recovery.TurnHold, what string) {
	t := h.Turn()
	r.mu.Lock()
	r.turn = h
	r.mu.Unlock()
	r.update(func(j *Journal) { j.Turn = &t })
	r.report(recovery.Step{Name: recovery.StepTurn, OK: true, Detail: what + " (" + t.Key + ")"})
}

// releaseTurn gives the turn back once the host is in rotation again (or
// was never taken out). While vigil stops it keeps the turn journaled: the
// next vigil takes it back, or it expires with its lease.
func (r *Recovery) releaseTurn(ctx context.Context) {
	if ctx.Err() != nil || r.drained() {
		return
	}
	r.mu.Lock()
	h := r.turn
	r.turn = nil
	r.mu.Unlock()
	if h == nil {
		return
	}
	r.update(func(j *Journal) { j.Turn = nil })
	if err := h.Release(context.WithoutCancel(ctx)); err != nil {
		r.log.WithError(err).WithFields(logrus.Fields{"key": h.Turn().Key}).Warn("could not give the pool's turn back; it expires with its lease")
		return
	}
	r.log.WithField("key", h.Turn().Key).Info("gave the pool's turn back")
}
