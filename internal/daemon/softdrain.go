package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/balancer"
)

// softDrainWeight is the share of its configured weight (percent) this
// node keeps at the load balancer while the limiter suspects a stall:
// new traffic goes to the pool's other members, and the node is still in
// rotation (not drained: a drain is the pool's lock, taken only by a
// recovery).
const softDrainWeight = 1

// softDrainTimeout bounds one call to the load balancer.
const softDrainTimeout = 5 * time.Second

// softDrain takes new traffic off this node softly while the limiter
// suspects the engine stalled, and gives it back when progress resumes
// (admission.WithSuspicionHook): a weight, reversible, no guard budget,
// never a restart. At a verdict the recovery drains and restores the
// node itself. Calls apply in the order the limiter made them, off its
// goroutine.
type softDrain struct {
	drainer balancer.Drainer
	dryRun  bool
	log     *logrus.Entry

	mu      sync.Mutex // serializes apply
	seqMu   sync.Mutex
	seq     uint64 // of the last set
	want    bool
	applied uint64 // the seq last applied
}

// set is the limiter's hook: on while suspected.
func (s *softDrain) set(on bool) {
	s.seqMu.Lock()
	s.seq++
	s.want = on
	s.seqMu.Unlock()
	go s.apply()
}

// apply tells the load balancer the latest wish, once.
func (s *softDrain) apply() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seqMu.Lock()
	seq, on := s.seq, s.want
	s.seqMu.Unlock()
	if seq == s.applied {
		return
	}
	s.applied = seq
	pct := 100
	if on {
		pct = softDrainWeight
	}
	log := s.log.WithFields(logrus.Fields{"load_balancer": s.drainer.String(), "weight_percent": pct})
	if s.dryRun {
		log.Info("dry run: would set this node's weight for a stall suspicion")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), softDrainTimeout)
	defer cancel()
	if err := s.drainer.SetWeight(ctx, pct); err != nil {
		log.WithError(err).Warn("cannot set this node's weight at the load balancer for a stall suspicion; " +
			"the limiter still sends nothing new to the engine")
		return
	}
	if on {
		log.Warn("engine suspected stalled: new traffic taken off this node at the load balancer (weight lowered, not drained)")
	} else {
		log.Info("engine progresses again: this node's weight restored at the load balancer")
	}
}

// suspicionHook passes the limiter's suspicion to the soft drain (none
// before the drainer is built: nothing is in flight then).
func (d *daemon) suspicionHook(on bool) {
	if s := d.soft.Load(); s != nil {
		s.set(on)
	}
}
