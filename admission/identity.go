package admission

import (
	"net/http"
	"time"

	"github.com/vigil-dev/vigil/admission/calls"
)

// identity is what admission knows of the call a request is an attempt of:
// who sent it, how to find its other attempts' work (by idempotency key,
// or by fingerprint without one), and whether it is a retry that would
// create work.
type identity struct {
	tenant  string
	route   string        // the path: client timeouts are per route
	timeout time.Duration // announced by the client; 0: none
	idem    string        // the client's idempotency key; "" without
	// k is the call key (keyed) or the fingerprint (keyless).
	k calls.Key
	// coalesce: keyed with coalescing on, every attempt shares one
	// execution. adopt: keyless with coalescing and deferred cancellation
	// on, it may adopt an identical request's orphaned work.
	coalesce, adopt bool
	sdkRetry        int // X-Stainless-Retry-Count; -1: absent
	// retry: a later attempt (SDK-marked, or its key or fingerprint known
	// here). neverExecuted: a retry whose every earlier attempt here was
	// turned away or left before getting an execution; it creates no
	// second execution, so the budget treats it as neither a retry nor a
	// first attempt.
	retry, neverExecuted bool
	// gaveUp: keyed, how long the previous attempt's client waited before
	// it left unanswered (0: it did not).
	gaveUp time.Duration
}

// identify reads which call r is an attempt of, and what its earlier
// attempts did, from its headers and body.
func (l *Limiter) identify(r *http.Request, tenant string, body []byte, now time.Time) identity {
	c := identity{tenant: tenant, route: r.URL.Path, timeout: clientTimeout(r),
		idem: r.Header.Get(l.cfg.IdempotencyHeader), sdkRetry: stainlessRetryCount(r)}
	c.retry = c.sdkRetry > 0
	switch {
	case c.idem != "":
		c.k = calls.KeyOf(tenant, c.idem, r.Method, r.URL.RequestURI(), body)
		c.coalesce = l.cfg.Coalesce
		seen, executed, gaveUp := l.co.MarkSeen(c.k, now)
		if seen {
			c.retry, c.neverExecuted, c.gaveUp = true, !executed, gaveUp
		}
	case l.cfg.Coalesce && l.cfg.CancelAfter > 0:
		c.k = calls.Fingerprint(tenant, r.Method, r.URL.RequestURI(), body)
		c.adopt = true
		if seen, executed := l.co.Unanswered(c.k, now); seen {
			c.retry, c.neverExecuted = true, !executed
		}
	}
	return c
}

// keyed: the call has a client's idempotency key.
func (c *identity) keyed() bool { return c.idem != "" }

// orphanable: a keyless call whose client is an SDK that retries a
// timeout; its execution outlives the attempt for the retry to adopt.
func (c *identity) orphanable() bool { return c.adopt && c.sdkRetry >= 0 }

// holdsPlace: the call's queue place outlives its attempt, for its retry
// to resume (the core holds it by c.k).
func (c *identity) holdsPlace() bool { return c.keyed() || c.orphanable() }

// outlives: the call's execution outlives its attempt, so it may wait
// longer in the queue (see core.Request.Coalesced).
func (c *identity) outlives() bool { return c.coalesce || c.orphanable() }

// budgeted: a retry that would start another execution of its call.
func (c *identity) budgeted() bool { return c.retry && !c.neverExecuted }

// findable: a keyed retry that had an execution here to find. It tells
// whether the pool's load balancer routes by key; one whose earlier
// attempts were all turned away here found its call's state all the same.
func (c *identity) findable() bool { return c.coalesce && c.budgeted() }
