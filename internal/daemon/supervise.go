package daemon

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"
)

// supervisor runs the long-lived parts of `vigil run` and stops them all
// when one fails: vigil must never go on serving the proxy without a
// watchdog, or the reverse. A part fails when it returns an error, panics,
// or (if it must run until the end) returns at all before its context
// ends. The first failure cancels the shared context; Err reports it.
//
// An errgroup does the waiting and the first-error cancel; the supervisor
// adds what errgroup leaves to its caller: a name on every failure, a
// panic turned into a failure, and "returned before the end" counted as
// one.
type supervisor struct {
	group *errgroup.Group
	ctx   context.Context // the group's: ends at the parent's end or the first failure
	// cancel ends every part as the parent's end would (no failure).
	cancel  context.CancelCauseFunc
	log     *logrus.Entry
	logOnce sync.Once
}

func newSupervisor(parent context.Context, log *logrus.Entry) *supervisor {
	stoppable, cancel := context.WithCancelCause(parent)
	group, ctx := errgroup.WithContext(stoppable)
	return &supervisor{group: group, ctx: ctx, cancel: cancel, log: log}
}

// Context ends at the parent's end or at the first failure.
func (s *supervisor) Context() context.Context { return s.ctx }

// untilStopped marks a part that must run until the end: its return
// before then is a failure, even without an error.
const untilStopped = true

// partFailure is a part's failure, named; the group's context ends with
// it as its cause, which tells a failure from the parent's end.
type partFailure struct{ error }

func (f partFailure) Unwrap() error { return f.error }

// Go runs fn under supervision and returns a channel closed when it has
// returned. name says which part failed, e.g. "status.listen 127.0.0.1:9108".
func (s *supervisor) Go(name string, mustRun bool, fn func(ctx context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	s.group.Go(func() error {
		defer close(done)
		err := s.call(name, fn)
		switch {
		case s.ctx.Err() != nil && err == nil:
			return nil // stopped because everything is stopping
		case err != nil:
			err = fmt.Errorf("%s: %w", name, err)
		case mustRun:
			err = fmt.Errorf("%s: stopped on its own", name)
		default:
			return nil // a one-shot part is done
		}
		s.logOnce.Do(func() { s.log.WithError(err).Error("a part of vigil failed; stopping every part") })
		return partFailure{err}
	})
	return done
}

// call runs fn, turning a panic into an error so it stops the daemon the
// same way, loudly, with the stack in the log.
func (s *supervisor) call(name string, fn func(ctx context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.WithField("part", name).WithField("stack", string(debug.Stack())).Error("panic")
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(s.ctx)
}

// Err is the first failure, or nil if nothing failed (the parent ended).
func (s *supervisor) Err() error {
	var f partFailure
	if errors.As(context.Cause(s.ctx), &f) {
		return f.error
	}
	return nil
}

// Wait waits for every part to return.
func (s *supervisor) Wait() { _ = s.group.Wait() }
