package admission

import (
	"maps"

	"github.com/vigil-dev/vigil/admission/stats"
)

// Stats is a snapshot of what the limiter has done and holds (package
// stats, which also exposes it as the vigil_admission_* metrics).
type Stats = stats.Stats

// Stats returns a snapshot.
func (l *Limiter) Stats() Stats {
	// Found before all: a retry counts itself before it finds, so this
	// order never shows more found than retries.
	found := l.c.keyedRetriesFound.Load()
	s := Stats{
		KeyedRetriesFound:  found,
		KeyedRetries:       l.c.keyedRetries.Load(),
		Calls:              l.c.calls.Load(),
		Executions:         l.c.executions.Load(),
		Retries:            l.c.retries.Load(),
		Rejected:           make(map[string]uint64, len(l.c.rejected)),
		CoalescedAttached:  l.c.attached.Load(),
		CoalescedStored:    l.c.stored.Load(),
		Adopted:            l.c.adopted.Load(),
		AdoptedStored:      l.c.adoptedStored.Load(),
		CancelledImmediate: l.c.cancelledImmediate.Load(),
		CancelledDeferred:  l.c.cancelledDeferred.Load(),
		UpstreamErrors:     l.c.upstreamErrors.Load(),
		PassedThrough:      l.c.passedThrough.Load(),
	}
	for r, c := range l.c.rejected {
		s.Rejected[r] = c.Load()
	}
	s.StoredResults, s.StoredBytes, s.Running, s.Orphans = l.co.Stats()
	s.Moved, s.Held, s.Continued = l.c.moved.Load(), l.c.held.Load(), l.c.continued.Load()
	l.lostMu.Lock()
	s.Lost = maps.Clone(l.lost)
	l.lostMu.Unlock()
	_, s.HeldNow = l.out.Snapshot()
	s.Suspected = l.Suspected()
	s.Suspicions, s.FalseSuspicions, s.Diverted = l.c.suspicions.Load(), l.c.falseSuspicions.Load(), l.c.diverted.Load()
	for r, c := range l.c.heldRefused {
		if n := c.Load(); n > 0 {
			if s.HeldRefused == nil {
				s.HeldRefused = map[string]uint64{}
			}
			s.HeldRefused[r] = n
		}
	}
	if l.pauses != nil {
		s.Paused = l.pauses.Total()
	}
	if f, _ := l.out.Snapshot(); !f.Opened.IsZero() {
		s.LastHang = &f
	}
	s.SetCore(l.core.Stats())
	return s
}
