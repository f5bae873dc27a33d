package admission

import (
	"context"
	"testing"
	"time"
)

// Keyed retries that had an execution to find, and whether they found it:
// the share a pool's load balancer shows its key affinity by.
func TestKeyedRetriesFindTheirExecution(t *testing.T) {
	key := func(k string) []string { return []string{"Idempotency-Key", k} }
	retry := func(hdr ...string) []string { return append(hdr, "X-Stainless-Retry-Count", "1") }
	for _, tc := range []struct {
		name string
		// before runs earlier attempts on the same node (may be nil).
		before func(t *testing.T, p proxy, c func(hdr ...string) answer)
		// attempt is the attempt whose counting is checked.
		attempt        []string
		coalesceOff    bool
		retries, found uint64
	}{
		{name: "a first attempt is no retry", attempt: key("a")},
		{name: "a retry routed back to the node that ran its call finds the stored result",
			before:  func(t *testing.T, p proxy, c func(...string) answer) { c(key("a")...) },
			attempt: retry(key("a")...), retries: 1, found: 1},
		{name: "a retry without the SDK's header is known by its key",
			before:  func(t *testing.T, p proxy, c func(...string) answer) { c(key("a")...) },
			attempt: key("a"), retries: 1, found: 1},
		{name: "a retry routed to a node that never saw its key finds nothing",
			attempt: retry(key("a")...), retries: 1, found: 0},
		{name: "a retry of another call (other key) on the node finds nothing",
			before:  func(t *testing.T, p proxy, c func(...string) answer) { c(key("a")...) },
			attempt: retry(key("b")...), retries: 1, found: 0},
		{name: "an unkeyed retry cannot find anything and is not counted",
			attempt: retry()},
		{name: "a retry of a call turned away here had nothing to find and is not counted",
			before: func(t *testing.T, p proxy, c func(...string) answer) {
				// Held through the recovery until its client's own
				// timeout, then turned away.
				p.l.SetRecovering(true)
				if a := c(append(key("a"), "X-Stainless-Timeout", "0.3")...); a.status != 503 {
					t.Fatalf("while recovering: %d, want 503", a.status)
				}
				p.l.SetRecovering(false)
			},
			attempt: retry(key("a")...)},
		{name: "without coalescing nothing is counted",
			before:      func(t *testing.T, p proxy, c func(...string) answer) { c(key("a")...) },
			attempt:     retry(key("a")...),
			coalesceOff: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eng := newFakeEngine(t, okJSON)
			cfg := testConfig()
			cfg.Coalesce = !tc.coalesceOff
			p := startProxy(t, cfg, eng.srv.URL)
			cl := newClient(t)
			c := func(hdr ...string) answer {
				return call(context.Background(), cl, p.url, completionBody, hdr...)
			}
			if tc.before != nil {
				tc.before(t, p, c)
				eventually(t, time.Second, "executions finished", func() bool { return p.l.Stats().Running == 0 })
			}
			if a := c(tc.attempt...); a.status != 200 {
				t.Fatalf("attempt: HTTP %d %s", a.status, a.body)
			}
			s := p.l.Stats()
			if s.KeyedRetries != tc.retries || s.KeyedRetriesFound != tc.found {
				t.Errorf("keyed retries %d found %d, want %d and %d", s.KeyedRetries, s.KeyedRetriesFound, tc.retries, tc.found)
			}
		})
	}

	t.Run("a retry during its call's execution attaches and counts as found", func(t *testing.T) {
		release := make(chan struct{})
		eng := newFakeEngine(t, blockUntil(release))
		p := startProxy(t, testConfig(), eng.srv.URL)
		cl := newClient(t)
		first := make(chan answer, 1)
		go func() { first <- call(context.Background(), cl, p.url, completionBody, "Idempotency-Key", "x") }()
		eventually(t, 2*time.Second, "first attempt upstream", func() bool { return eng.calls.Load() == 1 })
		second := make(chan answer, 1)
		go func() {
			second <- call(context.Background(), cl, p.url, completionBody, "Idempotency-Key", "x", "X-Stainless-Retry-Count", "1")
		}()
		eventually(t, 2*time.Second, "retry attached", func() bool { return p.l.Stats().CoalescedAttached == 1 })
		close(release)
		<-first
		<-second
		if s := p.l.Stats(); s.KeyedRetries != 1 || s.KeyedRetriesFound != 1 {
			t.Errorf("keyed retries %d found %d, want 1 and 1", s.KeyedRetries, s.KeyedRetriesFound)
		}
	})
}
