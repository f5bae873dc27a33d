package admission

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/admission/calls"
	"github.com/vigil-dev/vigil/admission/core"
	"github.com/vigil-dev/vigil/admission/engineloss"
	"github.com/vigil-dev/vigil/admission/enginepoll"
	"github.com/vigil-dev/vigil/admission/inflight"
	"github.com/vigil-dev/vigil/admission/stats"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/util/pausemeter"
)

// Clock is the limiter's time source (see core.Clock): queue ages, rate
// windows, the deferred-cancellation and queue-wait timers all read it, so
// the limiter can keep a time-scaled engine's time (bench/).
type Clock = core.Clock

// Option adjusts a Limiter built by New.
type Option func(*Limiter)

// WithClock replaces the wall clock (a time-scaled engine's, bench/). A
// clock that runs faster than the wall says by how much with a method
// Scale() float64 (engine time = wall x Scale): the pause meter the stall
// watch reads ticks on wall time.
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
	transport *http.Transport
	co        *calls.Memory

	// The engine's load, read for the automatic cap and the stall
	// suspicion: reader reads the engine's /metrics by its profile (nil:
	// not read), poll reads through it (nil with it); pollDone is closed
	// when its loop ends.
	reader   *probes.Reader
	poll     *enginepoll.Poller
	pollDone chan struct{}

	// base is the parent context of keyed executions: they outlive the
	// request that created them, never the limiter.
	base context.Context
	stop context.CancelFunc

	// core decides admission: the cap, the queue, the quotas; this
	// package carries HTTP to it and the engine's answers back.
	core *core.Limiter

	c        counters
	inflight inflight.Calls

	// out is the engine's recovery as the limiter sees it; peers and node
	// are where cut calls may move and this vigil's name (outage.go).
	out    engineloss.Outage
	peers  func() []Peer
	node   string
	lostMu sync.Mutex
	lost   map[string]uint64 // calls cut by a lost engine that could not move, by why
	// lastSent is when the last call went to the engine (unix ns on the
	// limiter's clock; 0: none yet): at the verdict, how long vigil kept
	// feeding an engine that had stopped (Fate.LastSent).
	lastSent atomic.Int64

	// sus suspects a stalled engine (suspect.go; nil: off); stallLoopDone
	// is closed when its loop ends.
	sus           *engineloss.Suspicion
	stallLoopDone chan struct{}
	onSuspect     func(on bool) // WithSuspicionHook
	stallFloor    time.Duration // WithStallFloor
	// pauses measures vigil's own pauses, which the stall watch does not
	// count against the engine (pause.go; nil: no watch).
	pauses *pausemeter.Meter
	// sharedPauses: pauses is the caller's (WithPauses), running on the
	// limiter's clock; the limiter neither starts nor closes it.
	sharedPauses bool
	// episodes groups the suspicions for the log (suspect.go).
	episodes struct {
		sync.Mutex
		engineloss.Episodes
	}

	// keep writes what was learned across vigil's restart (learned.go).
	keep keeper
}

// counters are the monotonic counts behind Stats and the metrics (the
// core counts its own: admitted, queued, abandoned).
type counters struct {
	calls, executions, retries                              atomic.Uint64
	attached, stored, cancelledImmediate, cancelledDeferred atomic.Uint64
	upstreamErrors, passedThrough                           atomic.Uint64
	// keyedRetries counts keyed retries that had an execution to find
	// (see Stats.KeyedRetries); keyedRetriesFound those that found it.
	keyedRetries, keyedRetriesFound atomic.Uint64
	// adopted counts keyless attempts handed an identical request's
	// orphaned execution; adoptedStored its stored answer.
	adopted, adoptedStored atomic.Uint64
	rejected               map[string]*atomic.Uint64
	// Calls cut by a lost engine: moved to a peer, held for the
	// restarted engine, streams continued (lost ones: Limiter.lost).
	moved, held, continued atomic.Uint64
	// The stall suspicion: suspicions raised, those progress cleared
	// (false), calls sent to a peer instead of a held engine.
	suspicions, falseSuspicions, diverted atomic.Uint64
	// heldRefused counts, by reason, calls refused while the engine was
	// held (suspected, recovered, ramping).
	heldRefused map[string]*atomic.Uint64
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
		cfg:       cfg,
		upstream:  upstream,
		engineKey: engineAPIKey,
		clock:     core.WallClock,
		log:       discardLogger(),
		reader:    defaultReader(),
	}
	for _, o := range opts {
		o(l)
	}
	l.log = l.log.WithField("component", "admission")
	copts := []core.Option{core.WithClock(l.clock), core.WithLogger(l.log)}
	if cfg.SuspectStalls {
		l.sus = engineloss.NewSuspicion(l.stallFloor)
		copts = append(copts, core.WithProgress(l.sus.Last))
	}
	l.core = core.New(cfg, copts...)
	l.lost = map[string]uint64{}
	l.c.rejected = make(map[string]*atomic.Uint64, len(allReasons))
	l.c.heldRefused = make(map[string]*atomic.Uint64, len(allReasons))
	for _, r := range allReasons {
		l.c.rejected[r] = new(atomic.Uint64)
		l.c.heldRefused[r] = new(atomic.Uint64)
	}
	l.co = calls.New(calls.Config{CancelAfter: cfg.CancelAfter, ResultTTL: cfg.ResultTTL, StoreBytes: cfg.ResultStoreBytes},
		l.clock, calls.Hooks{Deferred: func() { l.c.cancelledDeferred.Add(1) },
			Immediate: func() { l.c.cancelledImmediate.Add(1) }})
	l.base, l.stop = context.WithCancel(context.Background())
	l.transport = newTransport()
	if l.reader != nil {
		// The reader scrapes the engine over the limiter's transport, with
		// the engine's key when the limiter injects it.
		engine := probes.EngineTarget(upstream, l.transport, "")
		if cfg.InjectAPIKey {
			engine.APIKey = engineAPIKey
		}
		l.poll = enginepoll.New(l.reader, engine, l.core, l.clock, l.log)
	}
	if l.reg != nil {
		if err := l.reg.Register(stats.NewCollector(l.Stats, allReasons)); err != nil {
			return nil, fmt.Errorf("admission: register metrics: %w", err)
		}
	}
	l.stallLoopDone = make(chan struct{})
	if l.sus != nil {
		l.startPauses() // here: past every error return, Close stops it
		go func() {
			defer close(l.stallLoopDone)
			l.sus.Run(suspicionHost{l: l, tick: make(chan struct{}, 1)})
		}()
	} else {
		close(l.stallLoopDone)
	}
	l.keep.done = make(chan struct{})
	if l.keep.store != nil {
		l.restoreLearned()
		go l.keepLearned()
	} else {
		close(l.keep.done)
	}
	l.pollDone = make(chan struct{})
	if l.poll != nil {
		go func() {
			defer close(l.pollDone)
			l.poll.Run(l.base)
		}()
	} else {
		close(l.pollDone)
	}
	return l, nil
}

// WithEngineReader is how the limiter reads the engine's /metrics: the
// same probes.Reader as the watchdog's, so both read the engine by its
// profile (vLLM's, SGLang's, llama.cpp's names, or engine.metrics). The
// default reads vLLM's names; nil disables reading the engine.
func WithEngineReader(r *probes.Reader) Option {
	return func(l *Limiter) { l.reader = r }
}

// sleepOn waits d on the limiter's clock (tick is the caller's, reused
// across waits); false once the limiter is closing.
func (l *Limiter) sleepOn(d time.Duration, tick chan struct{}) bool {
	return core.Sleep(l.base, l.clock, d, tick)
}

// defaultReader reads vLLM's names, the first engine vigil serves.
func defaultReader() *probes.Reader {
	p, _ := configs.ProfileFor(configs.KindVLLM)
	return probes.NewReader(p.Metrics, p.Kind, nil)
}

func discardLogger() *logrus.Entry {
	lg := logrus.New()
	lg.SetOutput(discard{})
	return logrus.NewEntry(lg)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Transport settings for the engine client (newTransport).
const (
	// engineDialTimeout bounds a connect to the engine.
	engineDialTimeout = 5 * time.Second
	// engineIdleTimeout is below the keep-alive of uvicorn (vLLM's HTTP
	// server, 5 s by default), so an idle connection is dropped here
	// before the engine closes it under a request.
	engineIdleTimeout = 4 * time.Second
	// engineMaxIdle is how many idle connections are kept: one per
	// request in flight at the highest cap, so a burst after a lull does
	// not dial.
	engineMaxIdle = 1024
)

// newTransport is the engine client, for http and https alike. It replays
// a request only by net/http's rule: after a reused connection failed
// before any of the request was written, or when the request is
// idempotent (GET, HEAD, OPTIONS, TRACE, or an Idempotency-Key or
// X-Idempotency-Key header) and its body can be replayed; so a completion
// without a key that the engine may have read never runs twice. Its
// context ending closes the connection, so the engine sees the client
// leave and aborts.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil, // the engine is local; never route it through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   engineDialTimeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:        engineMaxIdle,
		MaxIdleConnsPerHost: engineMaxIdle,
		IdleConnTimeout:     engineIdleTimeout,
		// Identity bodies: usage is read from the answer as it passes.
		DisableCompression: true,
	}
}

// Handler is the proxy: mount it on any server, or use Serve.
func (l *Limiter) Handler() http.Handler { return http.HandlerFunc(l.serveHTTP) }

// Serve answers on ln until ctx is done, then shuts down, giving the
// requests in flight admission.shutdown_grace to finish (a restart of
// vigil must not cut a stream that would end in time), and closes idle
// upstream connections. The server's
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
		ErrorLog:          log.New(errLog, "", 0), // accept errors, TLS noise: into logrus
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	l.log.WithField("listen", ln.Addr().String()).Info("admission proxy listening")
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		l.log.WithField("grace_seconds", l.cfg.ShutdownGrace.Seconds()).Info("admission proxy stopping: the requests in flight may finish")
		sctx, cancel := context.WithTimeout(context.Background(), l.cfg.ShutdownGrace)
		if serr := srv.Shutdown(sctx); serr != nil {
			l.log.WithError(serr).Warn("admission proxy: requests still in flight at the end of shutdown_grace are cut")
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
	l.co.CloseAll()
	<-l.pollDone
	<-l.stallLoopDone
	if l.pauses != nil && !l.sharedPauses {
		l.pauses.Close()
	}
	<-l.keep.done
	l.transport.CloseIdleConnections()
}

// SetSaturated is the watchdog's verdict that the engine is saturated
// (progressing under a deep queue of its own). While it holds, a fixed cap
// admits only 3/4 of itself; the automatic cap is cut by 1/4 once and does
// not grow. Requests over the cap wait in the bounded queue and get 503
// with Retry-After when it is full or their wait expires.
func (l *Limiter) SetSaturated(on bool) { l.core.SetSaturated(on) }

// SlowStart ramps the cap from 10% back to full over the configured
// slow_start, for an engine that just came back. The automatic cap also
// forgets its evidence (a restarted engine may differ) and probes again from
// at least its initial value.
func (l *Limiter) SlowStart() {
	if l.poll != nil {
		l.poll.ResetSeats() // the restarted engine's slots are read again
	}
	l.core.SlowStart()
}

// SetMaxInFlight sets a fixed cap (n > 0) or returns to the automatic one
// (n == 0); overrides use it and restore the old value at expiry.
func (l *Limiter) SetMaxInFlight(n int) { l.core.SetMaxInFlight(n) }

// MaxInFlight is the configured cap: the fixed value, or 0 for automatic
// (Stats.Cap is the cap in force).
func (l *Limiter) MaxInFlight() int { return l.core.MaxInFlight() }
