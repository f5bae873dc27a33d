package coord

import (
	"context"
	"strings"

	"github.com/vigil-dev/vigil/recovery"
)

// Turns is the recovery's Coordinator over s: a turn is a hold on the
// semaphore, journaled as its key and lease.
func Turns(s *Semaphore) recovery.Coordinator { return turns{s} }

type turns struct{ s *Semaphore }

func (e turns) Acquire(ctx context.Context, incident string, waiting func(string)) (recovery.TurnHold, error) {
	h, err := e.s.Acquire(ctx, incident, func(hs []Holder) {
		if waiting != nil {
			names := make([]string, len(hs))
			for i, h := range hs {
				names[i] = h.String()
			}
			waiting(strings.Join(names, ", "))
		}
	})
	if err != nil {
		return nil, err
	}
	return turn{h}, nil
}

func (e turns) Resume(ctx context.Context, t recovery.Turn) (recovery.TurnHold, error) {
	h, err := e.s.Resume(ctx, t.Key, t.Lease)
	if err != nil {
		return nil, err
	}
	return turn{h}, nil
}

type turn struct{ h *Hold }

func (t turn) Turn() recovery.Turn               { return recovery.Turn{Key: t.h.Key, Lease: t.h.Lease} }
func (t turn) Release(ctx context.Context) error { return t.h.Release(ctx) }
