package enginesim

import (
	"sync"
	"time"
)

// Engine is one simulated vLLM: an engine core goroutine stepping the
// scheduler, plus the HTTP handlers in front of it. It does not listen;
// Server (or httptest) does.
type Engine struct {
	cfg Config
	m   *metrics

	wallStart time.Time

	mu       sync.Mutex
	cond     *sync.Cond
	s        *sched
	inbox    []*request // arrived, not yet seen by the core
	aborts   []*request // clients gone, not yet seen by the core
	received uint64
	nextID   uint64
	hung     bool
	slow     float64
	dead     bool // crashed or closed: the core has stopped for good
	crashed  bool
	lastEnd  time.Time // wall time the previous step was due to end

	deadCh    chan struct{} // closed when the core stops (crash or Close)
	crashedCh chan struct{} // closed on Crash only
	loopDone  chan struct{}
	closeOnce sync.Once
}

// New builds an engine and starts its core. Call Close to stop it.
// It panics on an invalid Config (see Config.Validate), as a programming error.
func New(cfg Config) *Engine {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	e := &Engine{
		cfg:       cfg,
		m:         newMetrics(cfg),
		wallStart: time.Now(),
		slow:      1,
		deadCh:    make(chan struct{}),
		crashedCh: make(chan struct{}),
		loopDone:  make(chan struct{}),
	}
	e.cond = sync.NewCond(&e.mu)
	e.s = newSched(cfg, e.m)
	go e.loop()
	return e
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// engineAt converts a wall instant into engine time since New.
func (e *Engine) engineAt(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(e.wallStart)) * e.cfg.Scale)
}

// maxLag is how far behind its schedule the core may fall (GC, -race) and
// still catch up without sleeping; beyond it, the schedule restarts from now
// so an idle or hung spell is not "repaid" by a burst of instant steps.
const maxLag = 20 * time.Millisecond

func (e *Engine) loop() {
	defer close(e.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		for !e.dead && (e.hung || (len(e.inbox) == 0 && len(e.aborts) == 0 && e.s.idle())) {
			e.lastEnd = time.Time{}
			e.cond.Wait()
		}
		if e.dead {
			e.mu.Unlock()
			return
		}
		now := time.Now()
		e.drainLocked(e.engineAt(now))
		b := e.s.schedule(e.engineAt(now))
		if len(b.entries) == 0 {
			e.mu.Unlock()
			continue
		}
		slow := e.slow
		wallCost := e.cfg.wall(time.Duration(float64(e.s.cost(b)) * slow))
		start := e.lastEnd
		if start.IsZero() || now.Sub(start) > maxLag {
			start = now
		}
		end := start.Add(wallCost)
		e.lastEnd = end
		e.mu.Unlock()

		if d := time.Until(end); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-e.deadCh:
				timer.Stop()
				return
			}
		}

		e.mu.Lock()
		// A hang freezes the step in flight too: it never completes, so no
		// counter moves after Hang returns.
		waited := false
		for e.hung && !e.dead {
			waited = true
			e.cond.Wait()
		}
		if e.dead {
			e.mu.Unlock()
			return
		}
		at := end
		if waited {
			at = time.Now()
			e.lastEnd = time.Time{}
		}
		e.s.c.busy += time.Duration(float64(e.s.cost(b)) * slow)
		e.s.complete(b, e.engineAt(at))
		e.mu.Unlock()
	}
}

// drainLocked hands arrivals and aborts to the scheduler. Only the core does
// it, so while hung the scheduler (and its gauges) see nothing new.
func (e *Engine) drainLocked(now time.Duration) {
	for _, r := range e.inbox {
		e.s.add(r)
	}
	clear(e.inbox)
	e.inbox = e.inbox[:0]
	for _, r := range e.aborts {
		if r.state == stateNew {
			continue // cannot happen: inbox drained first
		}
		e.s.abort(r, now)
	}
	clear(e.aborts)
	e.aborts = e.aborts[:0]
	e.s.setGauges()
}

// submit hands a request to the core. It fails when the core is gone.
func (e *Engine) submit(r *request) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return false
	}
	r.arrival = e.engineAt(time.Now())
	e.inbox = append(e.inbox, r)
	e.received++
	e.cond.Broadcast()
	return true
}

// cancel tells the core that r's client went away.
func (e *Engine) cancel(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return
	}
	e.aborts = append(e.aborts, r)
	e.cond.Broadcast()
}

func (e *Engine) newID() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	return e.nextID
}

// Hang stops the core stepping (the step in flight never completes). The
// API keeps answering /v1/models, /health and /metrics, with frozen values;
// generation requests wait.
func (e *Engine) Hang() {
	e.mu.Lock()
	e.hung = true
	e.mu.Unlock()
}

// Slow makes every step take factor times longer (engine time), from the next step.
func (e *Engine) Slow(factor float64) {
	if !(factor > 0) {
		factor = 1
	}
	e.mu.Lock()
	e.slow = factor
	e.mu.Unlock()
}

// Clear lifts a hang and a slowdown. A crash cannot be cleared.
func (e *Engine) Clear() {
	e.mu.Lock()
	e.hung, e.slow = false, 1
	e.cond.Broadcast()
	e.mu.Unlock()
}

// Crash kills the core: /health answers 503, requests in flight get their
// connections dropped, and Crashed is closed (Server then closes its
// listeners; vllm-sim exits non-zero).
func (e *Engine) Crash() {
	e.mu.Lock()
	if !e.crashed && !e.dead {
		e.crashed = true
		close(e.crashedCh)
	}
	e.mu.Unlock()
	e.stop()
}

// Crashed is closed when the engine crashes.
func (e *Engine) Crashed() <-chan struct{} { return e.crashedCh }

// Close stops the core and waits for it. Requests in flight are dropped.
func (e *Engine) Close() {
	e.stop()
	<-e.loopDone
}

func (e *Engine) stop() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.dead = true
		close(e.deadCh)
		e.cond.Broadcast()
		e.mu.Unlock()
	})
}

// Stats is a snapshot of the engine's counts, for tests and benchmarks.
type Stats struct {
	// Received counts executions started: valid generation requests handed
	// to the engine, whether or not their client stayed.
	Received uint64 `json:"received"`
	// Admitted counts requests scheduled from waiting into running.
	Admitted uint64 `json:"admitted"`
	// Completed counts requests finished with stop or length.
	Completed uint64 `json:"completed"`
	// Aborted counts requests removed because their client went away.
	Aborted uint64 `json:"aborted"`
	// Running and Waiting are the scheduler's current queues (frozen while
	// hung); Pending counts arrivals the core has not seen yet.
	Running    int `json:"running"`
	Waiting    int `json:"waiting"`
	Pending    int `json:"pending"`
	MaxRunning int `json:"max_running"`
	// Steps counts completed engine steps.
	Steps uint64 `json:"steps"`
	// PromptTokens and GenerationTokens follow the vLLM counters;
	// PrefillTokens counts prompt tokens actually computed (paid), including
	// those of requests whose client left.
	PromptTokens     uint64 `json:"prompt_tokens"`
	GenerationTokens uint64 `json:"generation_tokens"`
	PrefillTokens    uint64 `json:"prefill_tokens"`
	// EngineTime is the engine clock now; BusyTime the engine time spent in
	// steps (slowdowns included), free of wall-clock jitter.
	EngineTime time.Duration `json:"engine_time_ns"`
	BusyTime   time.Duration `json:"busy_time_ns"`
	Fault      string        `json:"fault"`
	SlowFactor float64       `json:"slow_factor"`
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.s.c
	return Stats{
		Received: e.received, Admitted: c.admitted, Completed: c.completed, Aborted: c.aborted,
		Running: len(e.s.running), Waiting: len(e.s.waiting), Pending: len(e.inbox),
		MaxRunning: c.maxRunning, Steps: c.steps,
		PromptTokens: c.promptTokens, GenerationTokens: c.genTokens, PrefillTokens: c.prefillTokens,
		EngineTime: e.engineAt(time.Now()), BusyTime: c.busy, Fault: e.faultLocked(), SlowFactor: e.slow,
	}
}

func (e *Engine) faultLocked() string {
	switch {
	case e.crashed:
		return "crash"
	case e.dead:
		return "closed"
	case e.hung:
		return "hang"
	case e.slow != 1:
		return "slow"
	}
	return "none"
}
