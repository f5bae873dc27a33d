package coord

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/recovery"
)

// Turns is the recovery's Coordinator over s: a turn is a hold on the
// semaphore, journaled as its key and lease.
func Turns(s *Semaphore) recovery.Coordinator { return turns{s: s} }

// TurnOptions add the peers' own word to the semaphore's.
type TurnOptions struct {
	// Drained lists the other members out of rotation by their vigil's
	// hand now (their /status says drained); nil trusts etcd alone.
	//
	// A member cut off from etcd while it holds a turn stays drained
	// (its engine is mid-restart) after its lease expires and etcd hands
	// the place on. A granted turn therefore also waits while its
	// holders and the drained members together exceed Max: the limit
	// holds as long as the peers' /status can be read.
	Drained func(ctx context.Context) []string
	// Poll is how often a granted turn reads Drained again while it
	// waits (1s).
	Poll time.Duration
}

// TurnsWith is Turns with the peers' drained members counted (see
// TurnOptions).
func TurnsWith(s *Semaphore, o TurnOptions) recovery.Coordinator {
	if o.Poll <= 0 {
		o.Poll = time.Second
	}
	return turns{s: s, o: o}
}

type turns struct {
	s *Semaphore
	o TurnOptions
}

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
	if err := e.untilRoom(ctx, h, waiting); err != nil {
		_ = h.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return turn{h}, nil
}

// untilRoom returns once the members holding a turn (h included) and the
// members drained by their vigil number at most Max.
func (e turns) untilRoom(ctx context.Context, h *Hold, waiting func(string)) error {
	if e.o.Drained == nil {
		return nil
	}
	said := ""
	for {
		holders, err := e.s.Holders(ctx)
		if err != nil {
			return err
		}
		out := map[string]bool{e.s.opts.Node: true}
		for _, hd := range holders {
			out[hd.Node] = true
		}
		var beyond []string
		for _, n := range e.o.Drained(ctx) {
			if !out[n] {
				out[n] = true
				beyond = append(beyond, n)
			}
		}
		if len(out) <= e.s.opts.Max {
			return nil
		}
		slices.Sort(beyond)
		msg := fmt.Sprintf("%s drained without a turn in etcd (its vigil cut off from etcd mid-recovery?); "+
			"%d members out of rotation with this one, max_concurrent_recoveries is %d", strings.Join(beyond, ", "), len(out), e.s.opts.Max)
		if waiting != nil && msg != said {
			said = msg
			waiting(msg)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-h.Lost():
			return e.s.unavailable("lease lost while waiting for room", errors.New("not renewed within its TTL"))
		case <-time.After(e.o.Poll):
		}
	}
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
