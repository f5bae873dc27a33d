package enginesim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Engine is one simulated vLLM: one engine core goroutine per data-parallel
// rank, each stepping its own scheduler, plus the HTTP handlers in front of
// them. It does not listen; Server (or httptest) does.
type Engine struct {
	cfg   Config
	cores []*core
	expo  *metrics // any rank's metrics: they share one registry

	wallStart time.Time

	// mu guards every core's scheduler and queues as well as the fault
	// state below; each core waits on its own cond over it.
	mu     sync.Mutex
	next   int // round-robin dispatch: the rank of the next request
	nextID uint64
	slow   float64
	// asleep: put to sleep on purpose (vLLM's sleep mode): no core steps
	// until WakeUp, and /is_sleeping says so.
	asleep  bool
	wedge   chan struct{}  // non-nil while wedged; closed when cleared
	starve  time.Duration  // wall time each new API request waits (StarveAPI)
	failing map[string]int // endpoint path -> status code it answers
	dead    bool           // crashed or closed: the cores have stopped for good
	crashed bool

	deadCh    chan struct{} // closed when the cores stop (crash or Close)
	crashedCh chan struct{} // closed on Crash only
	closeOnce sync.Once
}

// core is one data-parallel rank: a scheduler and the goroutine stepping it.
// Its fields are guarded by Engine.mu.
type core struct {
	e        *Engine
	rank     int
	cond     *sync.Cond
	s        *sched
	inbox    []*request // arrived, not yet seen by the core
	aborts   []*request // clients gone, not yet seen by the core
	received uint64
	hung     bool
	// blocked: the last schedule found nothing to run although requests
	// are held (a decode stall); wait for a change instead of spinning.
	blocked bool
	passes  uint64    // scheduling passes, steps or not (tests: no spinning)
	lastEnd time.Time // wall time the previous step was due to end
	done    chan struct{}
}

// New builds an engine and starts its cores. Call Close to stop it.
// It panics on an invalid Config (see Config.Validate), as a programming error.
func New(cfg Config) *Engine {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	e := &Engine{
		cfg:       cfg,
		wallStart: time.Now(),
		slow:      1,
		failing:   map[string]int{},
		deadCh:    make(chan struct{}),
		crashedCh: make(chan struct{}),
	}
	ms := newRankMetrics(cfg, cfg.ranks())
	e.expo = ms[0]
	for rank, m := range ms {
		c := &core{e: e, rank: rank, s: newSched(cfg, m), done: make(chan struct{})}
		c.cond = sync.NewCond(&e.mu)
		e.cores = append(e.cores, c)
	}
	for _, c := range e.cores {
		go c.loop()
	}
	return e
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Ranks is the number of data-parallel engine cores.
func (e *Engine) Ranks() int { return len(e.cores) }

// engineAt converts a wall instant into engine time since New.
func (e *Engine) engineAt(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(e.wallStart)) * e.cfg.Scale)
}

// maxLag is how far behind its schedule the core may fall (GC, -race) and
// still catch up without sleeping; beyond it, the schedule restarts from now
// so an idle or hung spell is not "repaid" by a burst of instant steps.
const maxLag = 20 * time.Millisecond

func (c *core) loop() {
	e := c.e
	defer close(c.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		e.mu.Lock()
		// Nothing new and nothing runnable (idle, or every held request
		// waits on a stalled decode): sleep until something changes.
		for !e.dead && (c.hung || e.asleep || (len(c.inbox) == 0 && len(c.aborts) == 0 && (c.s.idle() || c.blocked))) {
			c.lastEnd = time.Time{}
			c.cond.Wait()
		}
		if e.dead {
			e.mu.Unlock()
			return
		}
		now := time.Now()
		c.drainLocked(e.engineAt(now))
		b := c.s.schedule(e.engineAt(now))
		c.passes++
		c.blocked = len(b.entries) == 0
		if c.blocked {
			e.mu.Unlock()
			continue
		}
		slow := e.slow
		wallCost := e.cfg.wall(time.Duration(float64(c.s.cost(b)) * slow))
		start := c.lastEnd
		if start.IsZero() || now.Sub(start) > maxLag {
			start = now
		}
		end := start.Add(wallCost)
		c.lastEnd = end
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
		for (c.hung || e.asleep) && !e.dead {
			waited = true
			c.cond.Wait()
		}
		if e.dead {
			e.mu.Unlock()
			return
		}
		at := end
		if waited {
			at = time.Now()
			c.lastEnd = time.Time{}
		}
		c.s.c.busy += time.Duration(float64(c.s.cost(b)) * slow)
		c.s.complete(b, e.engineAt(at))
		e.mu.Unlock()
	}
}

// drainLocked hands arrivals and aborts to the scheduler. Only the core does
// it, so while hung the scheduler (and its gauges) see nothing new.
func (c *core) drainLocked(now time.Duration) {
	for _, r := range c.inbox {
		c.s.add(r)
	}
	clear(c.inbox)
	c.inbox = c.inbox[:0]
	for _, r := range c.aborts {
		if r.state == stateNew {
			continue // cannot happen: inbox drained first
		}
		c.s.abort(r, now)
	}
	clear(c.aborts)
	c.aborts = c.aborts[:0]
	c.s.setGauges()
}

// wakeAllLocked makes every core look at its state again.
func (e *Engine) wakeAllLocked() {
	for _, c := range e.cores {
		c.blocked = false
		c.cond.Broadcast()
	}
}

// submit hands a request to the next rank, round-robin. vLLM's DP
// coordinator balances by load instead; round-robin keeps sending a hung
// rank its share, which then waits forever: the partial failure a watchdog
// must see. It fails when the engine is gone.
func (e *Engine) submit(r *request) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return false
	}
	c := e.cores[e.next]
	e.next = (e.next + 1) % len(e.cores)
	r.rank = c.rank
	r.arrival = e.engineAt(time.Now())
	c.inbox = append(c.inbox, r)
	c.received++
	c.cond.Broadcast()
	return true
}

// cancel tells r's core that its client went away.
func (e *Engine) cancel(r *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead {
		return
	}
	c := e.cores[r.rank]
	c.aborts = append(c.aborts, r)
	c.cond.Broadcast()
}

func (e *Engine) newID() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	return e.nextID
}

// Hang stops every rank stepping (the steps in flight never complete). The
// API keeps answering /v1/models, /health and /metrics, with frozen values;
// generation requests wait.
func (e *Engine) Hang() {
	e.mu.Lock()
	for _, c := range e.cores {
		c.hung = true
	}
	e.mu.Unlock()
}

// HangRank stops one rank stepping, as Hang does to all: its step in flight
// never completes, its series freeze and its requests wait forever, while
// the other ranks keep serving (and keep being sent their share).
func (e *Engine) HangRank(rank int) error {
	if rank < 0 || rank >= len(e.cores) {
		return fmt.Errorf("enginesim: rank %d out of range: the engine has ranks 0..%d", rank, len(e.cores)-1)
	}
	e.mu.Lock()
	e.cores[rank].hung = true
	e.mu.Unlock()
	return nil
}

// StallDecode stalls decoding on every rank, as a stuck pipeline stage or KV
// transfer does: admission and prefill go on, so every new request gets its
// first token (counted by vLLM's rules: its prompt, one generation token, a
// time-to-first-token observation), but no request gets a second one.
// Requests asking for one token still finish. With every seat held by a
// request waiting on decode, the cores stop stepping (and idle; they do not
// spin), so the iteration heartbeat moves only while something prefills.
func (e *Engine) StallDecode() {
	e.mu.Lock()
	for _, c := range e.cores {
		c.s.stallDecode = true
	}
	e.mu.Unlock()
}

// Wedge wedges the API server: it still accepts connections, but no API
// endpoint answers; each handler waits until its client gives up or the
// wedge is cleared (then it answers normally). The cores keep running and
// the control listener keeps working.
func (e *Engine) Wedge() {
	e.mu.Lock()
	if e.wedge == nil {
		e.wedge = make(chan struct{})
	}
	e.mu.Unlock()
}

// StarveAPI starves the API server, as an event loop blocked under extreme
// load is: each new request to any API endpoint waits d of wall time
// before it is served (0 lifts it), while the requests under way, their
// streams included, go on. Clients with a timeout shorter than d (vigil's
// probes) get no answer; patient ones (vigil's proxied calls) are served
// late. Unlike Wedge, the engine goes on answering.
func (e *Engine) StarveAPI(d time.Duration) {
	e.mu.Lock()
	e.starve = max(d, 0)
	e.mu.Unlock()
}

// FailEndpoint makes the API endpoint at path (e.g. "/v1/models") answer
// code with an OpenAI-shaped error body, whatever the method, while every
// other endpoint serves normally. Several endpoints may fail at once; a
// second call for the same path replaces its code.
func (e *Engine) FailEndpoint(path string, code int) error {
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("enginesim: endpoint %q must be a path starting with /", path)
	}
	if code < 400 || code > 599 {
		return fmt.Errorf("enginesim: endpoint %s: status code %d is not an error code (400-599)", path, code)
	}
	e.mu.Lock()
	e.failing[path] = code
	e.mu.Unlock()
	return nil
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

// Sleep puts the engine to sleep on purpose, as vLLM's POST /sleep does
// (weights offloaded): no step runs, requests wait, and /is_sleeping
// answers true until WakeUp. It is no fault: Clear leaves it.
func (e *Engine) Sleep() {
	e.mu.Lock()
	e.asleep = true
	e.mu.Unlock()
}

// WakeUp ends Sleep (vLLM's POST /wake_up): the held requests go on.
func (e *Engine) WakeUp() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asleep = false
	e.wakeAllLocked()
}

// Asleep reports whether the engine was put to sleep.
func (e *Engine) Asleep() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.asleep
}

// Clear lifts every fault but a crash: hangs (all ranks), a slowdown, a
// decode stall, a wedge (the waiting handlers then answer), a starved API
// server and failing endpoints.
func (e *Engine) Clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.cores {
		c.hung = false
		c.s.stallDecode = false
	}
	e.slow = 1
	e.starve = 0
	if e.wedge != nil {
		close(e.wedge)
		e.wedge = nil
	}
	clear(e.failing)
	e.wakeAllLocked()
}

// Crash kills the cores: /health answers 503, requests in flight get their
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

// Close stops the cores and waits for them. Requests in flight are dropped.
func (e *Engine) Close() {
	e.stop()
	for _, c := range e.cores {
		<-c.done
	}
}

func (e *Engine) stop() {
	e.closeOnce.Do(func() {
		e.mu.Lock()
		e.dead = true
		close(e.deadCh)
		e.wakeAllLocked()
		e.mu.Unlock()
	})
}

// apiFault is what the API middleware must do with a request to path: wait
// on wedge (non-nil while wedged), or answer code (0: serve normally).
func (e *Engine) apiFault(path string) (wedge <-chan struct{}, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.wedge != nil {
		return e.wedge, 0
	}
	return nil, e.failing[path]
}

// starved is how long a new API request waits first (StarveAPI).
func (e *Engine) starved() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.starve
}

// Stats is a snapshot of the engine's counts, for tests and benchmarks. With
// several ranks the top-level figures are sums over the ranks (MaxRunning is
// the largest of any one rank's batch) and Ranks has each rank's own.
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
	// Running and Waiting are the schedulers' current queues (frozen while
	// hung); Pending counts arrivals the cores have not seen yet.
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
	// steps (slowdowns included, summed over ranks), free of wall-clock jitter.
	EngineTime time.Duration `json:"engine_time_ns"`
	BusyTime   time.Duration `json:"busy_time_ns"`
	// Fault names the faults in force, joined by "+": "hang" (every rank),
	// "hang-rank-N" (some ranks), "decode-stall", "slow", "wedge",
	// "error <path> <code>"; "none" without any; "crash" or "closed" alone
	// once the cores are gone.
	Fault      string      `json:"fault"`
	SlowFactor float64     `json:"slow_factor"`
	Ranks      []RankStats `json:"ranks"`
}

// RankStats is one data-parallel rank's share of Stats.
type RankStats struct {
	Rank             int    `json:"rank"`
	Received         uint64 `json:"received"`
	Completed        uint64 `json:"completed"`
	Waiting          int    `json:"waiting"`
	Running          int    `json:"running"`
	Pending          int    `json:"pending"`
	Steps            uint64 `json:"steps"`
	PromptTokens     uint64 `json:"prompt_tokens"`
	GenerationTokens uint64 `json:"generation_tokens"`
	// Fault names the faults acting on this rank: "hang", "decode-stall",
	// "slow" joined by "+", or "none" ("crash"/"closed" once gone).
	Fault string `json:"fault"`
}

// Stats returns a snapshot.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := Stats{EngineTime: e.engineAt(time.Now()), Fault: e.faultLocked(), SlowFactor: e.slow}
	for _, c := range e.cores {
		k := c.s.c
		rs := RankStats{Rank: c.rank, Received: c.received, Completed: k.completed,
			Waiting: len(c.s.waiting), Running: len(c.s.running), Pending: len(c.inbox),
			Steps: k.steps, PromptTokens: k.promptTokens, GenerationTokens: k.genTokens,
			Fault: e.rankFaultLocked(c)}
		st.Ranks = append(st.Ranks, rs)
		st.Received += c.received
		st.Admitted += k.admitted
		st.Completed += k.completed
		st.Aborted += k.aborted
		st.Running += rs.Running
		st.Waiting += rs.Waiting
		st.Pending += rs.Pending
		st.MaxRunning = max(st.MaxRunning, k.maxRunning)
		st.Steps += k.steps
		st.PromptTokens += k.promptTokens
		st.GenerationTokens += k.genTokens
		st.PrefillTokens += k.prefillTokens
		st.BusyTime += k.busy
	}
	return st
}

// faultLocked names the engine's faults for its fault header and
// /fault: every hung rank (or "hang" when all are), then what all ranks
// share, then the API server's own faults.
func (e *Engine) faultLocked() string {
	var hung []string
	for _, c := range e.cores {
		if c.hung {
			hung = append(hung, "hang-rank-"+strconv.Itoa(c.rank))
		}
	}
	if len(hung) == len(e.cores) {
		hung = []string{"hang"}
	}
	var server []string
	if e.wedge != nil {
		server = append(server, "wedge")
	}
	if e.starve > 0 {
		server = append(server, "starved-api "+e.starve.String())
	}
	for _, p := range slices.Sorted(maps.Keys(e.failing)) {
		server = append(server, "error "+p+" "+strconv.Itoa(e.failing[p]))
	}
	return e.describeFaultsLocked(hung, server)
}

// rankFaultLocked names one rank's faults, as faultLocked does the
// engine's.
func (e *Engine) rankFaultLocked(c *core) string {
	var hung []string
	if c.hung {
		hung = []string{"hang"}
	}
	return e.describeFaultsLocked(hung, nil)
}

// describeFaultsLocked joins hung, the faults every rank shares
// (decode-stall, slow) and server with "+": "crash" or "closed" when the
// engine is gone, "none" when nothing is wrong.
func (e *Engine) describeFaultsLocked(hung, server []string) string {
	switch {
	case e.crashed:
		return "crash"
	case e.dead:
		return "closed"
	}
	parts := slices.Clone(hung)
	if e.decodeStalledLocked() {
		parts = append(parts, "decode-stall")
	}
	if e.slow != 1 {
		parts = append(parts, "slow")
	}
	parts = append(parts, server...)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// faultState is the detail GET /fault shows besides Stats.
type faultState struct {
	HungRanks   []int          `json:"hung_ranks"`
	DecodeStall bool           `json:"decode_stall"`
	Wedged      bool           `json:"wedged"`
	Errors      map[string]int `json:"errors"`
}

func (e *Engine) faults() faultState {
	e.mu.Lock()
	defer e.mu.Unlock()
	fs := faultState{HungRanks: []int{}, DecodeStall: e.decodeStalledLocked(), Wedged: e.wedge != nil, Errors: maps.Clone(e.failing)}
	for _, c := range e.cores {
		if c.hung {
			fs.HungRanks = append(fs.HungRanks, c.rank)
		}
	}
	return fs
}

// decodeStalledLocked: StallDecode sets every rank's flag at once, so any
// rank's flag is the engine's.
func (e *Engine) decodeStalledLocked() bool { return e.cores[0].s.stallDecode }
