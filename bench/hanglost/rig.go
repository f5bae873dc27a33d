package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/enginesim"
	"github.com/vigil-dev/vigil/internal/simclient"
)

// engineSlot is a simulated engine behind one address that can be hung,
// stopped and replaced by a fresh one, as an engine container restarted
// on the same port is: the stop drops every connection it holds, and
// until the new engine is up the address answers nothing (a connection
// reset, as from a closed port).
type engineSlot struct {
	cfg enginesim.Config
	cur atomic.Pointer[running]
	srv *httptest.Server
}

type running struct {
	e *enginesim.Engine
	h http.Handler
	// lastCall is when (wall, Unix nanoseconds) this engine last received
	// a call (a POST): after a hang, the last call sent to the hung engine.
	lastCall atomic.Int64
}

func newEngineSlot(cfg enginesim.Config) *engineSlot {
	s := &engineSlot{cfg: cfg}
	s.start()
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur := s.cur.Load()
		if cur == nil {
			panic(http.ErrAbortHandler)
		}
		if r.Method == http.MethodPost {
			cur.lastCall.Store(time.Now().UnixNano())
		}
		cur.h.ServeHTTP(w, r)
	}))
	return s
}

func (s *engineSlot) url() string { return s.srv.URL }

// lastCall is when the engine now behind the address last received a
// call (zero: none, or no engine).
func (s *engineSlot) lastCall() time.Time {
	if cur := s.cur.Load(); cur != nil {
		if n := cur.lastCall.Load(); n > 0 {
			return time.Unix(0, n)
		}
	}
	return time.Time{}
}

func (s *engineSlot) engine() *enginesim.Engine {
	if cur := s.cur.Load(); cur != nil {
		return cur.e
	}
	return nil
}

// start puts a fresh engine behind the address (the restart's new
// container, ready).
func (s *engineSlot) start() {
	e := enginesim.New(s.cfg)
	s.cur.Store(&running{e: e, h: e.Handler()})
}

// stop kills the engine: what it was answering is dropped.
func (s *engineSlot) stop() {
	if cur := s.cur.Swap(nil); cur != nil {
		cur.e.Close()
	}
}

func (s *engineSlot) close() {
	s.srv.CloseClientConnections()
	s.stop()
	s.srv.Close()
}

// engineConfig is the calibrated default simulated engine with seqs
// seats, at the run's scale.
func engineConfig(o options) enginesim.Config {
	cfg := harness.PaperEngineConfig(o.scale, true, "")
	cfg.MaxNumSeqs = o.seqs
	return cfg
}

// admissionConfig is vigil's default admission config with max_moves as
// the arm has it and engine_max_seqs set to the engine's seats (what an
// operator configures for an engine started with --max-num-seqs).
func admissionConfig(o options, maxMoves int, suspect bool) configs.Admission {
	cfg := configs.Default().Admission
	cfg.MaxMoves = maxMoves
	cfg.SuspectStalls = suspect
	if o.seqs != 256 {
		cfg.EngineMaxSeqs = o.seqs
	}
	return cfg
}

// armSpec is one way the limiter meets the hang.
type armSpec struct {
	name, what string
	maxMoves   int
	peer       bool
	// noSuspicion turns the stall suspicion off (admission.suspect_stalls
	// false): the engine is held only from the verdict on.
	noSuspicion bool
	// noHang: the engine never hangs; every suspicion is false (run it at
	// a -load past 1 for a saturated engine).
	noHang bool
}

var armSpecs = []armSpec{
	{name: "a: moving off", what: "max_moves 0, no stall suspicion: the calls in flight stay on the hung engine", maxMoves: 0, noSuspicion: true},
	{name: "b: no peer", what: "max_moves 2, no peer: the calls cut are held for the restarted engine", maxMoves: 2},
	{name: "c: a peer", what: "max_moves 2, a peer: the calls cut move to a second limiter in front of a healthy engine", maxMoves: 2, peer: true},
	{name: "d: a peer, suspicion off", what: "as c with admission.suspect_stalls false: nothing is held before the verdict", maxMoves: 2, peer: true, noSuspicion: true},
	{name: "e: no peer, suspicion off", what: "as b with admission.suspect_stalls false", maxMoves: 2, noSuspicion: true},
	{name: "f: no hang", what: "as b, but the engine never hangs: every suspicion is false", maxMoves: 2, noHang: true},
}

// armRun is what one arm measured.
type armRun struct {
	spec    armSpec
	results []result // by call
	// Engine times from the arm's start: the hang, the verdict (recovery
	// begins, the engine is stopped) and the restarted engine ready.
	hangAt, verdictAt, readyAt time.Duration
	// lastToHung is the hang to the last call the hung engine received
	// (negative: none after the hang), engine time.
	lastToHung time.Duration
	// At the hang: the limiter's queue and calls in flight, the engine's
	// running and waiting requests.
	limQueue, limInFlight, engRunning, engWaiting int
	fate                                          admission.Fate
	held                                          int // still held at the end
	stats                                         admission.Stats
	peerStats                                     *admission.Stats
	peerSent, peerDelivered                       int
	wall                                          time.Duration
}

// runArm serves calls (and, with a peer, the peer's own calls) through a
// fresh rig, with the hang, the verdict and the restart on schedule.
func runArm(ctx context.Context, o options, spec armSpec, calls, peerCalls []call) (*armRun, error) {
	wallStart := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slot := newEngineSlot(engineConfig(o))
	defer slot.close()

	var opts []admission.Option
	var peer *harness.Limiter
	var peerSlot *engineSlot
	if spec.peer {
		peerSlot = newEngineSlot(engineConfig(o))
		defer peerSlot.close()
		var err error
		peer, err = harness.StartLimiter(ctx, admissionConfig(o, 2, !spec.noSuspicion), peerSlot.url(), "", o.scale, harness.TimeClock,
			admission.WithNode("node2"))
		if err != nil {
			return nil, err
		}
		defer peer.Close()
		peers := []admission.Peer{{Node: "node2", URL: peer.URL()}}
		opts = append(opts, admission.WithPeers(func() []admission.Peer { return peers }))
	}
	opts = append(opts, admission.WithNode("node1"))
	lim, err := harness.StartLimiter(ctx, admissionConfig(o, spec.maxMoves, !spec.noSuspicion), slot.url(), "", o.scale, harness.TimeClock, opts...)
	if err != nil {
		return nil, err
	}
	defer lim.Close()

	clock := simclient.NewClock(o.scale)
	r := &armRun{spec: spec, results: make([]result, len(calls))}
	callCtx, stopCalls := context.WithCancel(ctx)
	defer stopCalls()
	var wg sync.WaitGroup
	send := func(cl *client, list []call, out func(int, result)) {
		defer wg.Done()
		var each sync.WaitGroup
		for i, c := range list {
			if !clock.SleepUntil(callCtx, c.at) {
				break
			}
			each.Go(func() { out(i, cl.do(callCtx, c)) })
		}
		each.Wait()
	}
	node := newClient(lim.URL(), clock, o.seed, o.retries)
	defer node.http.CloseIdleConnections()
	wg.Add(1)
	go send(node, calls, func(i int, res result) { r.results[i] = res })
	var peerSent, peerDelivered atomic.Int64
	if peer != nil && len(peerCalls) > 0 {
		pc := newClient(peer.URL(), clock, o.seed+1, o.retries)
		defer pc.http.CloseIdleConnections()
		wg.Add(1)
		go send(pc, peerCalls, func(_ int, res result) {
			peerSent.Add(1)
			if res.delivered() != nil {
				peerDelivered.Add(1)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if o.timeline != nil {
		go timeline(callCtx, o, clock, spec, slot, lim, peer, done)
	}

	// The fault: the engine hangs; the watchdog's verdict comes a
	// detection delay later and the recovery begins (the limiter is told,
	// the engine is stopped); a restart delay later the fresh engine is
	// ready and the recovery ends.
	if !clock.SleepUntil(ctx, o.warmup) {
		return nil, ctx.Err()
	}
	if spec.noHang {
		// No fault: the schedule's marks only sort the calls.
		st, eng := lim.Stats(), slot.engine().Stats()
		r.hangAt, r.lastToHung = clock.Now(), -1
		r.limQueue, r.limInFlight, r.engRunning, r.engWaiting = st.QueueDepth, st.InFlight, eng.Running, eng.Waiting
		if !clock.SleepUntil(ctx, o.warmup+o.detect) {
			return nil, ctx.Err()
		}
		r.verdictAt = clock.Now()
		if !clock.SleepUntil(ctx, o.warmup+o.detect+o.restart) {
			return nil, ctx.Err()
		}
		r.readyAt = clock.Now()
		return r.finish(ctx, o, clock, lim, peer, done, stopCalls, &peerSent, &peerDelivered, wallStart)
	}
	st, eng := lim.Stats(), slot.engine().Stats()
	slot.engine().Hang()
	r.hangAt = clock.Now()
	hungWall := time.Now()
	r.limQueue, r.limInFlight, r.engRunning, r.engWaiting = st.QueueDepth, st.InFlight, eng.Running, eng.Waiting
	if !clock.SleepUntil(ctx, o.warmup+o.detect) {
		return nil, ctx.Err()
	}
	r.verdictAt = clock.Now()
	lim.SetRecovering(true)
	r.lastToHung = time.Duration(float64(slot.lastCall().Sub(hungWall)) * o.scale)
	slot.stop()
	if !clock.SleepUntil(ctx, o.warmup+o.detect+o.restart) {
		return nil, ctx.Err()
	}
	slot.start()
	lim.SetRecovering(false)
	lim.SlowStart()
	r.readyAt = clock.Now()

	return r.finish(ctx, o, clock, lim, peer, done, stopCalls, &peerSent, &peerDelivered, wallStart)
}

// finish waits out the load and the calls, and reads the limiters.
func (r *armRun) finish(ctx context.Context, o options, clock *simclient.Clock, lim, peer *harness.Limiter, done <-chan struct{},
	stopCalls func(), peerSent, peerDelivered *atomic.Int64, wallStart time.Time) (*armRun, error) {
	// Every call ends by itself; the drain only bounds the wait.
	if !clock.SleepUntil(ctx, o.length()) {
		return nil, ctx.Err()
	}
	select {
	case <-done:
	case <-time.After(clock.Wall(o.drain)):
		stopCalls()
		<-done
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.fate, r.held = lim.RequestFate()
	r.stats = lim.Stats()
	if peer != nil {
		ps := peer.Stats()
		r.peerStats = &ps
	}
	r.peerSent, r.peerDelivered = int(peerSent.Load()), int(peerDelivered.Load())
	r.wall = time.Since(wallStart)
	return r, nil
}

// timeline prints the engine and the limiter every -timeline-every.
func timeline(ctx context.Context, o options, clock *simclient.Clock, spec armSpec, slot *engineSlot, lim, peer *harness.Limiter, done <-chan struct{}) {
	for at := o.every; ; at += o.every {
		if !clock.SleepUntil(ctx, at) {
			return
		}
		select {
		case <-done:
			return
		default:
		}
		eng := "engine stopped"
		if e := slot.engine(); e != nil {
			st := e.Stats()
			eng = fmt.Sprintf("engine running=%d waiting=%d completed=%d", st.Running, st.Waiting, st.Completed)
		}
		_, held := lim.RequestFate()
		s := lim.Stats()
		var rej []string
		for _, k := range slices.Sorted(maps.Keys(s.Rejected)) {
			if s.Rejected[k] > 0 {
				rej = append(rej, fmt.Sprintf("%s=%d", k, s.Rejected[k]))
			}
		}
		ps := ""
		if peer != nil {
			ps = " | peer " + peer.Brief()
		}
		fmt.Fprintf(o.timeline, "%s t=%4.0f %s %s held=%d suspected=%v rejected{%s}%s\n", spec.name, clock.Now().Seconds(), eng, lim.Brief(), held,
			s.Suspected, strings.Join(rej, " "), ps)
	}
}

// expectedTexts asks a fresh engine, unhurried (a high scale: only its
// text matters), for each call's answer without streaming: the text every
// answer to the call must have, streamed or not, continued or not.
func expectedTexts(ctx context.Context, calls []call) ([]string, error) {
	cfg := enginesim.DefaultConfig()
	cfg.Model = model
	cfg.Scale = 1e6
	slot := newEngineSlot(cfg)
	defer slot.close()
	hc := simclient.NewHTTPClient()
	defer hc.CloseIdleConnections()
	out := make([]string, len(calls))
	errs := make([]error, len(calls))
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				out[i], errs[i] = fetchText(ctx, hc, slot.url(), calls[i])
			}
		})
	}
	for i := range calls {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("expected text of call %d: %w", i, err)
		}
	}
	return out, nil
}

func fetchText(ctx context.Context, hc *http.Client, base string, c call) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl := &client{http: hc, base: base, clock: simclient.NewClock(1)}
	u := c
	u.body = unaryOf(c)
	u.kind = c.kind.unary()
	a := cl.attempt(cctx, u, 0)
	if a.outcome != okAnswer {
		return "", fmt.Errorf("%s (status %d)", a.outcome, a.status)
	}
	return a.text, nil
}
