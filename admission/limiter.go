package admission

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/internal/upstream"
)

const (
	// completionSpan is the window of the measured completion rate that
	// Retry-After is computed from.
	completionSpan = 10 * time.Second
	// unknownWait is the Retry-After when nothing has completed lately, so
	// no rate is known.
	unknownWait = 5 * time.Second
	// recoveringWait is the Retry-After while the engine restarts: engines
	// load for minutes, and the SDKs ignore anything over 60 s.
	recoveringWait = 30 * time.Second
	// saturatedShare of a fixed cap stays admitted while the watchdog
	// reports the engine saturated.
	saturatedShare = 0.75
	// slowStartFloor is where the cap starts its ramp after a recovery.
	slowStartFloor = 0.1
	// keyedWaitShare of its client's timeout is the queue wait of a
	// coalesced keyed call: the 503 with Retry-After must reach the client
	// before its own timeout does, so it waits out the delay and resumes
	// its held place instead of retrying at once. As late as that allows:
	// the call's place and its execution both outlive the attempt, so a
	// longer wait costs it nothing, and each attempt answered just before
	// the client gives up, followed by a Retry-After of up to 60 s,
	// stretches the call's life (4 attempts of 116 s and 3 waits of 60 s
	// for an SDK with 120 s and 3 retries). 3% of the timeout (3.6 s of
	// 120 s) is left for the network and the client's own clock.
	keyedWaitShare = 0.97
)

// Option adjusts a Limiter built by New.
type Option func(*Limiter)

// WithClock replaces the wall clock (tests).
func WithClock(c Clock) Option { return func(l *Limiter) { l.clock = c } }

// WithLogger sets where the limiter logs; the default discards.
func WithLogger(e *logrus.Entry) Option { return func(l *Limiter) { l.log = e } }

// WithRegisterer registers the vigil_admission_* metrics; nil registers
// nothing.
func WithRegisterer(r prometheus.Registerer) Option { return func(l *Limiter) { l.reg = r } }

// Limiter is the admission proxy in front of one engine. Build it with New,
// serve it with Serve (or mount Handler), steer it with the Set* methods.
type Limiter struct {
	cfg       configs.Admission
	upstream  *url.URL
	engineKey configs.Secret
	clock     Clock
	log       *logrus.Entry
	reg       prometheus.Registerer
	transport roundTripper
	co        *coalescer

	// The engine's queue gauges, read for the automatic cap.
	gaugeWaiting, gaugeRunning string
	pollDone                   chan struct{}

	// base is the parent context of keyed executions: they outlive the
	// request that created them, never the limiter.
	base context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	fixed    int // > 0: a fixed cap; 0: automatic
	auto     *autoLimit
	inFlight int
	// inFlightArea is the integral of inFlight over time (request-seconds)
	// up to inFlightSince: the difference between two readings over the
	// time between them is the mean in flight, what an answer ran beside.
	inFlightArea  float64
	inFlightSince time.Time
	waiters       list.List // of *waiter, oldest first
	// held indexes the placeholders in waiters: queue places of keyed calls
	// whose attempt ended, kept for a retry of the same call to take over.
	held        map[key]*waiter
	queuedBytes int64 // request bodies held by live waiters
	saturated   bool
	recovering  bool
	slowFrom    time.Time // zero: no slow start running
	tenants     *tenantTable
	budget      *retryBudget
	completions *slidingSum
	// Last reading of the engine's queue gauges (-1: none yet).
	engineWaiting, engineRunning float64

	c counters
}

// counters are the monotonic counts behind Stats and the metrics.
type counters struct {
	calls, executions, retries, admitted, queued, abandoned atomic.Uint64
	attached, stored, cancelledImmediate, cancelledDeferred atomic.Uint64
	upstreamErrors, passedThrough                           atomic.Uint64
	// keyedRetries counts keyed retries that had an execution to find
	// (see Stats.KeyedRetries); keyedRetriesFound those that found it.
	keyedRetries, keyedRetriesFound atomic.Uint64
	rejected                        map[string]*atomic.Uint64
}

// New builds a limiter that forwards to upstream (the engine's base URL,
// without /v1). engineAPIKey, when set and cfg.InjectAPIKey is on, replaces
// the client's Authorization upstream.
func New(cfg configs.Admission, upstream *url.URL, engineAPIKey configs.Secret, opts ...Option) (*Limiter, error) {
	if upstream == nil || upstream.Host == "" || (upstream.Scheme != "http" && upstream.Scheme != "https") {
		return nil, fmt.Errorf("admission: upstream %q must be an http(s) URL with a host", fmt.Sprint(upstream))
	}
	if cfg.Order != "fifo" && cfg.Order != "newest_first" {
		return nil, fmt.Errorf("admission: order must be fifo or newest_first, got %q", cfg.Order)
	}
	if cfg.MaxInFlight < 0 || cfg.MaxQueue < 0 || cfg.MaxQueueWait <= 0 || cfg.MaxBodyBytes <= 0 || cfg.RetryWindow <= 0 {
		return nil, errors.New("admission: max_in_flight, max_queue must be >= 0 and max_queue_wait, " +
			"max_body_bytes, retry_window > 0 (was the config validated?)")
	}
	if cfg.IdempotencyHeader == "" {
		cfg.IdempotencyHeader = "Idempotency-Key"
	}
	l := &Limiter{
		cfg:           cfg,
		upstream:      upstream,
		engineKey:     engineAPIKey,
		clock:         realClock{},
		log:           discardLogger(),
		fixed:         cfg.MaxInFlight,
		gaugeWaiting:  "vllm:num_requests_waiting",
		gaugeRunning:  "vllm:num_requests_running",
		tenants:       newTenantTable(cfg.Tenants),
		engineWaiting: -1,
		held:          map[key]*waiter{},
		engineRunning: -1,
		budget:        newRetryBudget(cfg.RetryRatio, cfg.RetryWindow),
	}
	for _, o := range opts {
		o(l)
	}
	l.log = l.log.WithField("component", "admission")
	l.auto = newAutoLimit(cfg.TTFTTarget, l.clock.Now())
	l.auto.seats = cfg.EngineMaxSeqs
	l.completions = newSlidingSum(completionSpan, 10)
	l.c.rejected = make(map[string]*atomic.Uint64, len(allReasons))
	for _, r := range allReasons {
		l.c.rejected[r] = new(atomic.Uint64)
	}
	l.co = newCoalescer(cfg, l.clock, func() { l.c.cancelledDeferred.Add(1) },
		func() { l.c.cancelledImmediate.Add(1) })
	l.base, l.stop = context.WithCancel(context.Background())
	l.transport = newTransport(upstream)
	if l.reg != nil {
		if err := l.reg.Register(&collector{l: l}); err != nil {
			return nil, fmt.Errorf("admission: register metrics: %w", err)
		}
	}
	l.pollDone = make(chan struct{})
	if l.gaugeWaiting != "" {
		go l.pollEngine()
	} else {
		close(l.pollDone)
	}
	return l, nil
}

func discardLogger() *logrus.Entry {
	lg := logrus.New()
	lg.SetOutput(discard{})
	return logrus.NewEntry(lg)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// roundTripper is how the limiter calls the engine.
type roundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// newTransport picks the engine client: for a plain-http engine (the usual
// case, on the same host) vigil's own, which makes no goroutine hand-offs
// per request (see package upstream); for https, net/http's Transport.
func newTransport(u *url.URL) roundTripper {
	if u.Scheme == "http" {
		return &upstream.Transport{}
	}
	return &http.Transport{
		Proxy: nil, // the engine is local; never route it through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     4 * time.Second, // below the engine's keep-alive (uvicorn: 5 s)
		// Identity bodies: usage is read from the answer as it passes.
		DisableCompression: true,
	}
}

// Handler is the proxy: mount it on any server, or use Serve.
func (l *Limiter) Handler() http.Handler { return http.HandlerFunc(l.serveHTTP) }

// Serve answers on ln until ctx is done, then shuts down (5 s grace for
// requests in flight) and closes idle upstream connections. The server's
// header and read timeouts come from the config: a client dribbling its
// headers or body is cut off instead of holding a goroutine.
func (l *Limiter) Serve(ctx context.Context, ln net.Listener) error {
	errLog := l.log.WriterLevel(logrus.DebugLevel)
	defer errLog.Close()
	srv := &http.Server{
		Handler:           l.Handler(),
		ReadHeaderTimeout: l.cfg.ReadHeaderTimeout,
		ReadTimeout:       l.cfg.ReadTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          newStdLogger(errLog),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	l.log.WithField("listen", ln.Addr().String()).Info("admission proxy listening")
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if serr := srv.Shutdown(sctx); serr != nil {
			_ = srv.Close()
		}
		cancel()
		err = <-errc
	}
	l.transport.CloseIdleConnections()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("admission: serve %s: %w", ln.Addr(), err)
	}
	return nil
}

// ListenAndServe listens on the configured address and calls Serve.
func (l *Limiter) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", l.cfg.Listen)
	if err != nil {
		return fmt.Errorf("admission: listen %s: %w", l.cfg.Listen, err)
	}
	return l.Serve(ctx, ln)
}

// Close cancels every execution still running (deferred ones included) and
// closes idle upstream connections. Handlers still serving return soon
// after. The limiter must not be used afterwards.
func (l *Limiter) Close() {
	l.stop()
	l.co.closeAll()
	<-l.pollDone
	l.transport.CloseIdleConnections()
}

// SetSaturated is the watchdog's verdict that the engine is saturated
// (progressing under a deep queue of its own). While it holds, a fixed cap
// admits only 3/4 of itself; the automatic cap is cut by 1/4 once and does
// not grow; neither while the engine's queue reads as long prompts waiting
// their turn for prefill on an engine with room (autoLimit.tighten).
// Requests over the cap wait in the bounded queue and get 503 with
// Retry-After when it is full or their wait expires.
func (l *Limiter) SetSaturated(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if on == l.saturated {
		return
	}
	now := l.clock.Now()
	l.saturated = on
	l.auto.hold = on
	if on && l.fixed == 0 {
		l.auto.tighten(now)
	}
	l.log.WithFields(logrus.Fields{"saturated": on, "cap": l.capLocked(now)}).Info("admission: engine saturation changed")
	l.dispatchLocked(now)
}

// SetRecovering marks the engine as being restarted: new requests and every
// waiter get 503 with Retry-After until it is cleared. Clearing it does not
// start a slow start by itself: the recovery calls SlowStart once the
// engine is back, and a recovery that failed leaves the cap as it was.
func (l *Limiter) SetRecovering(on bool) {
	l.mu.Lock()
	if on == l.recovering {
		l.mu.Unlock()
		return
	}
	l.recovering = on
	if on {
		for l.waiters.Len() > 0 {
			if w := l.removeWaiterLocked(l.waiters.Front()); !w.placeholder {
				w.ch <- waitResult{rej: l.recoveringRejection()}
			}
		}
	}
	l.mu.Unlock()
	l.log.WithField("recovering", on).Info("admission: engine recovery changed")
}

// SlowStart ramps the cap from 10% back to full over the configured
// slow_start, for an engine that just came back. The automatic cap also
// forgets its evidence (a restarted engine may differ) and probes again from
// at least its initial value.
func (l *Limiter) SlowStart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if l.cfg.SlowStart > 0 {
		l.slowFrom = now
	}
	keep := max(l.auto.limit, autoInitial)
	l.auto.reset(now)
	l.auto.limit = keep
	l.log.WithFields(logrus.Fields{"slow_start_seconds": l.cfg.SlowStart.Seconds(), "cap": l.capLocked(now)}).
		Info("admission: slow start")
}

// SetMaxInFlight sets a fixed cap (n > 0) or returns to the automatic one
// (n == 0); overrides use it and restore the old value at expiry.
func (l *Limiter) SetMaxInFlight(n int) {
	if n < 0 {
		n = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fixed = n
	now := l.clock.Now()
	l.log.WithFields(logrus.Fields{"max_in_flight": n, "cap": l.capLocked(now)}).Info("admission: max_in_flight set")
	l.dispatchLocked(now)
}

// MaxInFlight is the configured cap: the fixed value, or 0 for automatic
// (Stats.Cap is the cap in force).
func (l *Limiter) MaxInFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fixed
}

// capLocked is the cap in force now: fixed or automatic, ramped by slow
// start, reduced while saturated.
func (l *Limiter) capLocked(now time.Time) int {
	c := l.fixed
	if c == 0 {
		c = l.auto.cap()
	} else if l.saturated && !l.auto.backlog {
		// Not while the engine's queue is long prompts waiting for prefill
		// on an engine with room (autoLimit.tighten).
		c = max(1, int(float64(c)*saturatedShare))
	}
	if !l.slowFrom.IsZero() {
		el := now.Sub(l.slowFrom)
		if el >= l.cfg.SlowStart {
			l.slowFrom = time.Time{}
		} else {
			f := slowStartFloor + (1-slowStartFloor)*float64(el)/float64(l.cfg.SlowStart)
			c = max(1, int(math.Round(float64(c)*f)))
		}
	}
	return c
}

// waiter is one request queued for a slot, or a placeholder: the queue
// place of a keyed call whose attempt ended (its client timed out or was
// told to come back), kept so the call's retry resumes from it. A
// placeholder holds no body, is never admitted and never counts in flight.
type waiter struct {
	at     time.Time
	ch     chan waitResult // buffered 1: the dispatcher never blocks
	elem   *list.Element
	queued bool
	bytes  int64 // the body this waiter holds
	// retry: a later attempt of a call (SDK-marked, a key seen before, or a
	// held place taken over). newest_first serves these after every first
	// attempt, oldest call first.
	retry bool
	// Placeholders only: the call's key and the timer that drops it.
	placeholder bool
	k           key
	stopHold    func() bool
}

// waitResult: a slot (rej == nil) or a rejection.
type waitResult struct {
	rej      *rejection
	inFlight int // with a slot: requests in flight, this one included
	// at and area: when the slot was granted, and inFlightArea then.
	at   time.Time
	area float64
}

// addInFlightLocked changes the requests in flight by d at now, keeping
// their integral over time.
func (l *Limiter) addInFlightLocked(now time.Time, d int) {
	if !l.inFlightSince.IsZero() && now.After(l.inFlightSince) {
		l.inFlightArea += float64(l.inFlight) * now.Sub(l.inFlightSince).Seconds()
	}
	l.inFlightSince = now
	l.inFlight += d
}

// meanInFlightLocked is the mean number of requests in flight from a
// ticket's admission to now, the ticket included; the count at admission
// when no time has passed.
func (l *Limiter) meanInFlightLocked(tk *ticket, now time.Time) int {
	d := now.Sub(tk.admitted).Seconds()
	if d <= 0 {
		return tk.inFlightAt
	}
	area := l.inFlightArea
	if now.After(l.inFlightSince) {
		area += float64(l.inFlight) * now.Sub(l.inFlightSince).Seconds()
	}
	return int(math.Round((area - tk.areaAt) / d))
}

func (l *Limiter) removeWaiterLocked(e *list.Element) *waiter {
	w := l.waiters.Remove(e).(*waiter)
	w.queued = false
	if w.placeholder {
		if l.held[w.k] == w {
			delete(l.held, w.k)
		}
		if w.stopHold != nil {
			w.stopHold()
		}
	} else {
		l.queuedBytes -= w.bytes
	}
	return w
}

// liveWaitersLocked is the number of queued requests, placeholders aside.
func (l *Limiter) liveWaitersLocked() int { return l.waiters.Len() - len(l.held) }

// nextWaiterLocked is the live waiter to admit next, placeholders skipped,
// or nil. fifo: the oldest. newest_first: the newest first attempt, else the
// oldest retry. The two halves of newest_first answer different clients. A
// first attempt's client is on its first deadline: the newest can still
// make it, the oldest is about to give up. A retry's client has already
// missed that deadline and comes back a bounded number of times: the
// oldest call has the fewest attempts left, so it goes first, and no retry
// displaces fresh work (retries are what keeps an overload going).
func (l *Limiter) nextWaiterLocked() *list.Element {
	live := func(e *list.Element) bool { return !e.Value.(*waiter).placeholder }
	if l.cfg.Order == "fifo" {
		for e := l.waiters.Front(); e != nil; e = e.Next() {
			if live(e) {
				return e
			}
		}
		return nil
	}
	var oldestRetry *list.Element
	for e := l.waiters.Back(); e != nil; e = e.Prev() {
		if !live(e) {
			continue
		}
		if !e.Value.(*waiter).retry {
			return e
		}
		oldestRetry = e
	}
	return oldestRetry
}

// holdLocked turns a keyed waiter whose attempt ended into a placeholder
// for d: a retry of the same call arriving meanwhile takes its place in
// the queue; otherwise it is dropped, never admitted.
func (l *Limiter) holdLocked(w *waiter, k key, d time.Duration) {
	l.queuedBytes -= w.bytes
	w.bytes = 0
	w.placeholder, w.k = true, k
	l.held[k] = w
	w.stopHold = l.clock.AfterFunc(d, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.queued && l.held[k] == w {
			l.removeWaiterLocked(w.elem)
		}
	})
}

// dispatchLocked hands freed slots to waiters, newest or oldest first.
func (l *Limiter) dispatchLocked(now time.Time) {
	c := l.capLocked(now)
	for l.inFlight < c {
		e := l.nextWaiterLocked()
		if e == nil {
			return
		}
		w := l.removeWaiterLocked(e)
		l.addInFlightLocked(now, 1)
		l.c.admitted.Add(1)
		w.ch <- waitResult{inFlight: l.inFlight, at: now, area: l.inFlightArea}
	}
}

// aheadLocked counts the calls to be served before w's call comes back
// and resumes its place: for fifo every entry in front of it; for
// newest_first every first attempt waiting (they go first) plus the
// retries and held places in front of it (older calls). Held places count:
// their clients are coming back too. This is what makes the Retry-After of
// a call deep in a backlog honest, and long (up to the 60 s the SDKs obey).
func (l *Limiter) aheadLocked(w *waiter) int {
	n, before := 0, true
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if e == w.elem {
			before = false
			continue
		}
		o := e.Value.(*waiter)
		switch {
		case before && (l.cfg.Order == "fifo" || o.placeholder || o.retry):
			n++
		case l.cfg.Order != "fifo" && !o.placeholder && !o.retry:
			n++
		}
	}
	return n
}

// estimatedWaitLocked is how long until ahead requests have completed at
// the measured completion rate: the honest Retry-After.
func (l *Limiter) estimatedWaitLocked(now time.Time, ahead int) time.Duration {
	rate := l.completions.sum(now) / completionSpan.Seconds()
	if rate <= 0 {
		return unknownWait
	}
	return time.Duration(float64(ahead+1) / rate * float64(time.Second))
}

func (l *Limiter) recoveringRejection() *rejection {
	return &rejection{status: http.StatusServiceUnavailable, reason: ReasonRecovering, typ: "server_error",
		message: "The engine is restarting; retry after the indicated delay.", wait: recoveringWait}
}

func (l *Limiter) queueRejection(reason string, wait time.Duration) *rejection {
	msg := "The engine is at capacity and the admission queue is full; retry after the indicated delay."
	if reason == ReasonQueueTimeout {
		msg = "The engine is at capacity and this request waited too long for a slot; retry after the indicated delay."
	}
	return &rejection{status: http.StatusServiceUnavailable, reason: reason, typ: "server_error", message: msg, wait: wait}
}

// admission describes one request asking for a slot.
type admission struct {
	tenant string // key hash
	tokens int    // estimated prompt + max_tokens
	prompt int    // estimated prompt tokens (of tokens)
	retry  bool   // creates a new execution although it is a retry
	// unexecutedRetry: a retry of a call none of whose attempts executed;
	// it is neither budgeted nor counted as a first attempt.
	unexecutedRetry bool
	maxWait         time.Duration
	// deadline: the client's announced timeout (X-Stainless-Timeout); 0: none.
	deadline time.Duration
	// keyed: the request carries an idempotency key, k its call key; its
	// queue place survives the attempt for a retry to resume.
	keyed bool
	k     key
	bytes int64 // body size, held while queued
}

// ticket is a granted slot plus the quota charges made for it. Exactly one
// of cancel (never reached the engine) or done (it did) ends it.
type ticket struct {
	l        *Limiter
	admitted time.Time
	tenant   *tenantState
	tokens   int
	prompt   int // the estimate of tokens' prompt part
	retry    bool
	deadline time.Duration // the client's announced timeout; 0: none
	// inFlightAt: requests in flight when this one was admitted, itself
	// included; areaAt: the limiter's inFlightArea then.
	inFlightAt int
	areaAt     float64
	ended      atomic.Bool
}

var errClientGone = errors.New("client went away")

// enter applies, in order: recovery, the tenant's quotas, the retry budget,
// then the cap and its queue. It returns a ticket, a rejection, or
// errClientGone when the client left while queued (it is removed from the
// queue at once).
func (l *Limiter) enter(ctx context.Context, a admission) (*ticket, *rejection, error) {
	l.mu.Lock()
	now := l.clock.Now()
	if l.recovering {
		l.mu.Unlock()
		return nil, l.recoveringRejection(), nil
	}
	if !a.retry && !a.unexecutedRetry {
		l.budget.first(now)
	}
	t := l.tenants.lookup(a.tenant, now)
	if t != nil {
		if v := t.check(now, a.tokens); v.reason != "" {
			rj := &rejection{status: http.StatusTooManyRequests, reason: v.reason, typ: "rate_limit_error",
				wait: v.wait, final: v.never, message: tenantMessage(t, v)}
			if v.reason == ReasonTenantInFlight {
				rj.wait = l.estimatedWaitLocked(now, 0)
			}
			l.mu.Unlock()
			return nil, rj, nil
		}
	}
	if a.retry {
		if ok, wait := l.budget.take(now); !ok {
			l.mu.Unlock()
			return nil, &rejection{status: http.StatusTooManyRequests, reason: ReasonRetryBudget, typ: "rate_limit_error",
				wait: wait, message: "Too many retries: retries that start new work are limited to a share of " +
					"first attempts; retry after the indicated delay, with the same Idempotency-Key."}, nil
		}
	}
	if t != nil {
		t.charge(now, a.tokens)
	}
	tk := &ticket{l: l, tenant: t, tokens: a.tokens, prompt: a.prompt, retry: a.retry, deadline: a.deadline}
	l.dispatchLocked(now) // the cap may have grown since the last release (slow start)
	c := l.capLocked(now)
	ph := l.held[a.k]
	if !a.keyed {
		ph = nil
	}
	if l.inFlight < c && l.liveWaitersLocked() == 0 {
		if ph != nil {
			l.removeWaiterLocked(ph.elem) // the call is served: its place is no longer needed
		}
		l.addInFlightLocked(now, 1)
		l.c.admitted.Add(1)
		if l.inFlight >= c {
			l.auto.markDemand()
		}
		tk.inFlightAt, tk.areaAt = l.inFlight, l.inFlightArea
		l.mu.Unlock()
		tk.admitted = now
		return tk, nil, nil
	}
	l.auto.markDemand()
	if rj := l.makeRoomLocked(now, a.bytes, ph == nil); rj != nil {
		l.undoLocked(now, tk)
		l.mu.Unlock()
		return nil, rj, nil
	}
	var w *waiter
	if ph != nil && ph.queued {
		// A retry of a call whose earlier attempt was queued: it resumes
		// from that attempt's place instead of starting over.
		delete(l.held, a.k)
		ph.stopHold()
		w = &waiter{at: ph.at, ch: make(chan waitResult, 1), queued: true, elem: ph.elem, retry: true}
		ph.elem.Value = w
		ph.queued = false
	} else {
		w = &waiter{at: now, ch: make(chan waitResult, 1), queued: true, retry: a.retry || a.unexecutedRetry}
		w.elem = l.waiters.PushBack(w)
	}
	w.bytes = a.bytes
	l.queuedBytes += a.bytes
	l.c.queued.Add(1)
	l.mu.Unlock()

	stop := l.clock.AfterFunc(a.maxWait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.queued && !w.placeholder {
			now := l.clock.Now()
			rj := l.queueRejection(ReasonQueueTimeout, l.estimatedWaitLocked(now, l.aheadLocked(w)))
			if a.keyed && l.held[a.k] == nil {
				// The client comes back after Retry-After: keep its place
				// that long, plus cancel_after for the retry's own delays.
				l.holdLocked(w, a.k, min(rj.wait*6/5, maxRetryAfter)+l.cfg.CancelAfter)
			} else {
				l.removeWaiterLocked(w.elem)
			}
			w.ch <- waitResult{rej: rj}
		}
	})
	defer stop()
	var res waitResult
	select {
	case res = <-w.ch:
	case <-ctx.Done():
		l.mu.Lock()
		if w.queued && !w.placeholder {
			if a.keyed && l.cfg.CancelAfter > 0 && l.held[a.k] == nil {
				// Like an execution's deferred cancellation: the client's
				// retry (SDK backoff of a few seconds) resumes from here.
				l.holdLocked(w, a.k, l.cfg.CancelAfter)
			} else {
				l.removeWaiterLocked(w.elem)
			}
			l.undoLocked(l.clock.Now(), tk)
			l.mu.Unlock()
			l.c.abandoned.Add(1)
			return nil, nil, errClientGone
		}
		l.mu.Unlock()
		// A slot or a rejection was handed over just as the client left.
		if res = <-w.ch; res.rej == nil {
			tk.admitted = l.clock.Now()
			tk.cancel()
		} else {
			l.mu.Lock()
			l.undoLocked(l.clock.Now(), tk)
			l.mu.Unlock()
		}
		l.c.abandoned.Add(1)
		return nil, nil, errClientGone
	}
	if res.rej != nil {
		l.mu.Lock()
		l.undoLocked(l.clock.Now(), tk)
		l.mu.Unlock()
		return nil, res.rej, nil
	}
	tk.admitted, tk.inFlightAt, tk.areaAt = res.at, res.inFlight, res.area
	return tk, nil, nil
}

// makeRoomLocked makes room in the queue for a waiter holding n bytes of
// body (in a new entry, or in a held place it takes over): within
// max_queue entries and max_queue_bytes. Placeholders make room first
// (they are only a chance of a retry); then newest_first turns away the
// oldest waiters, whose clients are the closest to giving up, and fifo
// turns away the newcomer (the returned rejection).
func (l *Limiter) makeRoomLocked(now time.Time, n int64, newEntry bool) *rejection {
	full := func() bool {
		return (newEntry && l.waiters.Len() >= l.cfg.MaxQueue) ||
			(l.cfg.MaxQueueBytes > 0 && l.queuedBytes+n > l.cfg.MaxQueueBytes)
	}
	if l.cfg.MaxQueue == 0 || (l.cfg.MaxQueueBytes > 0 && n > l.cfg.MaxQueueBytes) {
		return l.queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))
	}
	for e := l.waiters.Front(); e != nil && full(); {
		next := e.Next()
		if e.Value.(*waiter).placeholder {
			l.removeWaiterLocked(e)
		}
		e = next
	}
	for full() {
		if l.cfg.Order == "fifo" || l.liveWaitersLocked() == 0 {
			return l.queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))
		}
		old := l.removeWaiterLocked(l.nextOldestLocked())
		old.ch <- waitResult{rej: l.queueRejection(ReasonQueueFull, l.estimatedWaitLocked(now, l.liveWaitersLocked()))}
	}
	return nil
}

// nextOldestLocked is the oldest live waiter (there must be one).
func (l *Limiter) nextOldestLocked() *list.Element {
	for e := l.waiters.Front(); e != nil; e = e.Next() {
		if !e.Value.(*waiter).placeholder {
			return e
		}
	}
	return nil
}

// undoLocked refunds the quota charges of a request that got no slot.
func (l *Limiter) undoLocked(now time.Time, tk *ticket) {
	if tk.tenant != nil {
		tk.tenant.refund(now, tk.tokens)
	}
	if tk.retry {
		l.budget.give(now)
	}
}

func tenantMessage(t *tenantState, v quotaVerdict) string {
	switch {
	case v.never:
		return fmt.Sprintf("This request needs more tokens than the key's whole quota of %d per minute; "+
			"reduce max_tokens or the prompt.", t.limits.TPM)
	case v.reason == ReasonTenantRPM:
		return fmt.Sprintf("Rate limit reached: %d requests per minute for this key.", t.limits.RPM)
	case v.reason == ReasonTenantTPM:
		return fmt.Sprintf("Rate limit reached: %d tokens per minute for this key.", t.limits.TPM)
	default:
		return fmt.Sprintf("Concurrency limit reached: %d requests at a time for this key.", t.limits.MaxInFlight)
	}
}

// cancel ends a ticket whose request never reached the engine: the slot is
// freed and the quota charges refunded.
func (tk *ticket) cancel() {
	if tk.ended.Swap(true) {
		return
	}
	l := tk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.addInFlightLocked(now, -1)
	l.undoLocked(now, tk)
	l.dispatchLocked(now)
}

// outcome is what an upstream call reports when it ends.
type outcome struct {
	dropped   bool // upstream failure: 5xx, refused, reset mid-answer
	cancelled bool // we cancelled it (client gone, deferral expired)
	success   bool // 2xx, read to the end
	streamed  bool // an SSE answer
	completionTokens,
	totalTokens int // -1: unknown
}

// done ends a ticket whose request reached the engine: frees the slot,
// corrects the tenant's token charge and feeds the automatic cap.
func (tk *ticket) done(o outcome) {
	if tk.ended.Swap(true) {
		return
	}
	l := tk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	n := l.meanInFlightLocked(tk, now)
	l.addInFlightLocked(now, -1)
	if tk.tenant != nil {
		tk.tenant.finish(now, tk.tokens, o.totalTokens)
	}
	if !o.cancelled {
		l.completions.add(now, 1)
	}
	if l.fixed == 0 {
		switch {
		case o.dropped:
			l.auto.drop(tk.admitted, now)
		case o.success:
			l.auto.observeDone(tk.admitted, now, tk.deadline, o.streamed, n, tk.size(o))
		}
	}
	l.dispatchLocked(now)
}

// size is the answer's work for the engine (answerSize): its output and
// prompt tokens as the answer's usage (or its stream's events) tells, else
// as estimated at admission (max_tokens, the body's length).
func (tk *ticket) size(o outcome) int {
	prompt, output := tk.prompt, tk.tokens-tk.prompt
	if o.completionTokens >= 0 {
		output = o.completionTokens
		if o.totalTokens >= o.completionTokens {
			prompt = o.totalTokens - o.completionTokens
		}
	}
	return answerSize(prompt, output)
}

// firstByte feeds a streamed answer's upstream time to first byte (its
// TTFT) to the automatic cap as soon as it is known.
func (tk *ticket) firstByte(ttft time.Duration) {
	l := tk.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fixed != 0 {
		return
	}
	now := l.clock.Now()
	if l.auto.observeTTFT(tk.admitted, ttft, now) {
		l.dispatchLocked(now)
	}
}

// stainlessRetry reports whether an OpenAI SDK marked this attempt a retry.
func stainlessRetry(r *http.Request) bool {
	v := r.Header.Get("X-Stainless-Retry-Count")
	if v == "" {
		return false // the common case, without the parse error's allocation
	}
	n, err := strconv.Atoi(v)
	return err == nil && n > 0
}

// queueWaitFor bounds a request's queue wait by max_queue_wait and by its
// client's own timeout when the SDK announces it (clientTimeout, 0: none).
// Half of it, usually: waiting out the whole timeout in the queue leaves no
// time to generate, and the attempt turns into a retry anyway. A coalesced keyed call loses nothing by waiting longer: its
// queue place and its execution both outlive the attempt, so the retry
// resumes either; it waits up to keyedWaitShare of the timeout, then is
// told when to come back (Retry-After) while its place is held.
func (l *Limiter) queueWaitFor(clientTimeout time.Duration, coalesced bool) time.Duration {
	d := l.cfg.MaxQueueWait
	if clientTimeout > 0 {
		share := 0.5
		if coalesced {
			share = keyedWaitShare
		}
		d = min(d, time.Duration(share*float64(clientTimeout)))
	}
	return max(d, time.Millisecond)
}

// clientTimeout is the timeout an OpenAI SDK announces for this attempt
// (X-Stainless-Timeout, seconds), or 0.
func clientTimeout(r *http.Request) time.Duration {
	v := r.Header.Get("X-Stainless-Timeout")
	if v == "" {
		return 0
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || !(s > 0 && s <= 1e6) { // NaN fails both
		return 0
	}
	return time.Duration(s * float64(time.Second))
}
