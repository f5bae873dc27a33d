package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/sirupsen/logrus"
)

// supervisor runs the long-lived parts of `vigil run` and stops them all
// when one fails: vigil must never go on serving the proxy without a
// watchdog, or the reverse. A part fails when it returns an error, panics,
// or (if it must run until the end) returns at all before its context
// ends. The first failure cancels the shared context; Err reports it.
type supervisor struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	log    *logrus.Entry
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error
}

func newSupervisor(parent context.Context, log *logrus.Entry) *supervisor {
	ctx, cancel := context.WithCancelCause(parent)
	return &supervisor{ctx: ctx, cancel: cancel, log: log}
}

// Context ends at the parent's end or at the first failure.
func (s *supervisor) Context() context.Context { return s.ctx }

// untilStopped marks a part that must run until the end: its return
// before then is a failure, even without an error.
const untilStopped = true

// Go runs fn under supervision and returns a channel closed when it has
// returned. name says which part failed, e.g. "status.listen 127.0.0.1:9108".
func (s *supervisor) Go(name string, mustRun bool, fn func(ctx context.Context) error) <-chan struct{} {
	done := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		err := s.call(name, fn)
		switch {
		case s.ctx.Err() != nil && err == nil:
			// Stopped because everything is stopping.
		case err != nil:
			s.fail(fmt.Errorf("%s: %w", name, err))
		case mustRun:
			s.fail(fmt.Errorf("%s: stopped on its own", name))
		}
	}()
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

func (s *supervisor) fail(err error) {
	s.mu.Lock()
	first := s.err == nil
	if first {
		s.err = err
	}
	s.mu.Unlock()
	if first {
		s.log.WithError(err).Error("a part of vigil failed; stopping every part")
	}
	s.cancel(err)
}

// Err is the first failure, or nil if nothing failed (the parent ended).
func (s *supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Wait waits for every part to return.
func (s *supervisor) Wait() { s.wg.Wait() }
