package recoverer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/backoff"
)

// journal records that step is about to run (with mutate's changes) and
// saves the journal: a step that cannot be journaled does not run.
func (r *Recovery) journal(step recovery.StepName, mutate func(*Journal)) error {
	now := r.o.Now()
	r.mu.Lock()
	r.j.Step, r.j.StepAt = step, now
	if mutate != nil {
		mutate(&r.j)
	}
	j := r.j
	r.mu.Unlock()
	if r.o.DryRun {
		return nil
	}
	if err := r.o.Store.Save(JournalSection, j); err != nil {
		return fmt.Errorf("journal step %s: %w", step, err)
	}
	return nil
}

// update changes the journal and saves it; a save error is logged (the
// step it follows has already happened). mutate runs under the lock and
// must not call out of the package.
func (r *Recovery) update(mutate func(*Journal)) {
	r.mu.Lock()
	mutate(&r.j)
	j := r.j
	r.mu.Unlock()
	r.save(j)
}

// save writes j, outside the lock. Only the sequence's goroutine changes
// the journal while it runs, so saves cannot overtake each other.
func (r *Recovery) save(j Journal) {
	if r.o.DryRun {
		return
	}
	if err := r.o.Store.Save(JournalSection, j); err != nil {
		r.saveBad.Failed(r.log, logrus.ErrorLevel, err, "cannot save the recovery journal")
		return
	}
	r.saveBad.OK(r.log, "the recovery journal is saved again")
}

func (r *Recovery) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.j.Drained
}

func (r *Recovery) setRecovering(on bool) {
	if r.o.Limiter != nil && !r.o.DryRun {
		r.o.Limiter.SetRecovering(on)
	}
}

// backoff is the wait before the next attempt after the journal's
// failures: doubling from RetryMin to RetryMax, with jitter so that the
// vigils of a pool that failed on the same Docker or HAProxy outage do not
// retry together.
func (r *Recovery) backoff() time.Duration {
	r.mu.Lock()
	n := r.j.Failures
	r.mu.Unlock()
	return r.backoffAfter(n)
}

func (r *Recovery) backoffAfter(failures int) time.Duration {
	return backoff.Policy{Min: r.o.RetryMin, Max: r.o.RetryMax, Rand: r.o.Jitter}.Delay(max(failures, 1))
}

// report stamps s, logs it and tells the reporter, with no lock held: the
// pager takes its own lock and asks Outlook, which takes the recovery's.
func (r *Recovery) report(s recovery.Step) {
	r.mu.Lock()
	s.Incident = r.j.Incident
	r.mu.Unlock()
	s.At, s.DryRun = r.o.Now(), r.o.DryRun
	fields := logrus.Fields{"incident": s.Incident, "step": s.Name, "ok": s.OK, "dry_run": s.DryRun}
	if s.Err != "" {
		fields["error"] = s.Err
	}
	if s.Guard != "" {
		fields["guard"] = s.Guard
	}
	if !s.Until.IsZero() {
		fields["until"] = s.Until.UTC().Format(time.RFC3339)
	}
	if s.Dropped > 0 {
		fields["dropped_requests"] = s.Dropped
	}
	l := r.log.WithFields(fields)
	msg := s.Detail
	if s.DryRun && !strings.HasPrefix(msg, "would") && s.Name != recovery.StepResolved && s.Name != recovery.StepGuardRefused && s.Name != recovery.StepFailed {
		msg = "would: " + msg
	}
	switch s.Name {
	case recovery.StepFailed:
		l.Error(msg)
	case recovery.StepGuardRefused:
		l.Warn(msg)
	default:
		l.Info(msg)
	}
	if r.o.Reporter != nil {
		r.o.Reporter.RecoveryStep(s)
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
