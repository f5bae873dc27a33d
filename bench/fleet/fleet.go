package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/vigil-dev/vigil/balancer"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/restarter"
	"github.com/vigil-dev/vigil/state"
	"github.com/vigil-dev/vigil/watchdog"
)

// params are one fleet's settings; times are wall time.
type params struct {
	n int
	// max is max_concurrent_recoveries, minServing min_serving.
	max, minServing int
	leaseTTL        time.Duration
	// restartFor is how long a stand-in engine loads after a restart.
	restartFor time.Duration
	// poll is how often a vigil's "watchdog" re-asks for a recovery while
	// its engine is hung (the watchdog's interval).
	poll time.Duration
	// proxied gives every member its own loopback proxy to etcd, so a
	// scenario can cut a member off (partition).
	proxied bool
	prefix  string
	// etcdOnly wires the turns on etcd's word alone, as before the
	// drained peers were counted (-etcd-only: the control).
	etcdOnly bool
}

// engineState is a stand-in engine's state: what the watchdog's probes
// and the peers' /status would say of it.
type engineState int

const (
	serving engineState = iota
	hung
	loading
)

func (e engineState) String() string {
	return [...]string{"healthy", "hung", "loading"}[e]
}

// node is one member's engine and load balancer server, as the in-memory
// balancer sees it.
type node struct {
	engine    engineState
	startID   int
	startedAt time.Time
	readyAt   time.Time
	out       bool // out of rotation (drained by its vigil)
	// hungAt is when the engine last hung (zero once restarted): a drain
	// measures the wait for a turn from it.
	hungAt time.Time
	// hangs numbers the engine's hangs: one incident each.
	hangs int
}

// fleet is N members' engines behind one in-memory balancer, and the
// observer that checks both bounds at every change of it.
type fleet struct {
	p     params
	mu    sync.Mutex
	nodes []node
	obs   observer
}

// observer is told every change of the balancer's state, under the
// balancer's lock, so no instant escapes it.
type observer struct {
	start time.Time
	// minServing / maxOut over the run; buckets over time.
	minServing, maxOut int
	// belowFloor: instants serving went under min_serving; overLimit:
	// instants more than max members were out of rotation. drainsBelow:
	// drains made while fewer than min_serving others served.
	belowFloor, overLimit, drainsBelow int
	firstOver                          string
	bucket                             time.Duration
	series                             []bucketFig
	longestWait                        time.Duration
	waits                              int
	lastRecovered                      time.Time
}

type bucketFig struct{ minServing, maxOut int }

func newFleet(p params) *fleet {
	f := &fleet{p: p, nodes: make([]node, p.n)}
	now := time.Now()
	for i := range f.nodes {
		f.nodes[i] = node{startedAt: now.Add(-time.Hour), startID: 1}
	}
	f.obs = observer{start: now, minServing: p.n, bucket: time.Second}
	return f
}

// counts is serving (in rotation, engine healthy) and out (out of rotation).
func (f *fleet) counts() (in, out int) {
	for _, n := range f.nodes {
		if n.out {
			out++
		} else if n.engine == serving {
			in++
		}
	}
	return in, out
}

// observe checks the bounds after a change; f.mu is held.
func (f *fleet) observe(now time.Time, what string) {
	s, out := f.counts()
	o := &f.obs
	o.minServing = min(o.minServing, s)
	o.maxOut = max(o.maxOut, out)
	if s < f.p.minServing {
		o.belowFloor++
	}
	if out > f.p.max {
		o.overLimit++
		if o.firstOver == "" {
			o.firstOver = fmt.Sprintf("%s at %s: %d out", what, now.Sub(o.start).Round(time.Millisecond), out)
		}
	}
	b := int(now.Sub(o.start) / o.bucket)
	for len(o.series) <= b {
		o.series = append(o.series, bucketFig{minServing: s, maxOut: out})
	}
	o.series[b].minServing = min(o.series[b].minServing, s)
	o.series[b].maxOut = max(o.series[b].maxOut, out)
}

// hang wedges member i's engine.
func (f *fleet) hang(i int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &f.nodes[i]
	if n.engine == hung {
		return
	}
	now := time.Now()
	n.engine, n.hungAt = hung, now
	n.hangs++
	f.observe(now, fmt.Sprintf("node%d hung", i))
}

// tick moves loading engines whose time has come to serving.
func (f *fleet) tick() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for i := range f.nodes {
		n := &f.nodes[i]
		if n.engine == loading && !now.Before(n.readyAt) {
			n.engine = serving
			f.observe(now, fmt.Sprintf("node%d ready", i))
		}
	}
}

// allServing reports every member in rotation with its engine serving.
func (f *fleet) allServing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, _ := f.counts()
	return s == f.p.n
}

func (f *fleet) engineOf(i int) engineState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[i].engine
}

func (f *fleet) isOut(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[i].out
}

// outNodes lists the members out of rotation.
func (f *fleet) outNodes() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for i, n := range f.nodes {
		if n.out {
			out = append(out, i)
		}
	}
	return out
}

// peers is what member self's vigil reads from the peers' /status: every
// registered member it knows but itself.
func (f *fleet) peers(self int, regs []coord.Registered) []pool.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]pool.Member, 0, len(regs))
	for _, r := range regs {
		var i int
		if _, err := fmt.Sscanf(r.Node, "node%d", &i); err != nil || i == self || i < 0 || i >= len(f.nodes) {
			continue
		}
		n := f.nodes[i]
		out = append(out, pool.Member{Node: r.Node, URL: r.URL, State: n.engine.String(), Drained: n.out})
	}
	return out
}

// coordinator is the member's turns, wired as the daemon wires them:
// with the peers' drained members counted (internal/cli/poolview.go),
// unless the fleet runs the old wiring (etcd's word alone).
func (f *fleet) coordinator(sem *coord.Semaphore, m *member) recovery.Coordinator {
	if f.p.etcdOnly {
		return coord.Turns(sem)
	}
	return coord.TurnsWith(sem, coord.TurnOptions{Poll: 50 * time.Millisecond, Drained: func(context.Context) []string {
		// As internal/cli's drainedPeers: the registered members and
		// those whose registration vanished, read from the balancer
		// here instead of their /status.
		gone := map[string]bool{}
		regs := m.dir.Registered()
		for _, r := range m.dir.Gone() {
			gone[r.Node] = true
			regs = append(regs, r)
		}
		var out []string
		for _, pm := range f.peers(m.i, regs) {
			switch {
			case pm.Drained:
				out = append(out, pm.Node)
			case gone[pm.Node]:
				m.dir.Forget(pm.Node)
			}
		}
		return out
	}})
}

// lb is member i's server on the in-memory balancer.
type lb struct {
	f *fleet
	i int
}

func (b lb) setOut(out bool) {
	f := b.f
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &f.nodes[b.i]
	if n.out == out {
		return
	}
	now := time.Now()
	n.out = out
	if out {
		others := 0
		for j, m := range f.nodes {
			if j != b.i && !m.out && m.engine == serving {
				others++
			}
		}
		if others < f.p.minServing {
			f.obs.drainsBelow++
		}
		if !n.hungAt.IsZero() {
			f.obs.waits++
			f.obs.longestWait = max(f.obs.longestWait, now.Sub(n.hungAt))
		}
		f.observe(now, fmt.Sprintf("node%d drained", b.i))
		return
	}
	f.observe(now, fmt.Sprintf("node%d restored", b.i))
	if n.engine == serving {
		f.obs.lastRecovered = now
	}
}

func (b lb) Drain(context.Context) error          { b.setOut(true); return nil }
func (b lb) Ready(context.Context) error          { b.setOut(false); return nil }
func (b lb) SetWeight(context.Context, int) error { return nil }
func (b lb) String() string                       { return fmt.Sprintf("in-memory balancer node%d", b.i) }
func (b lb) State(context.Context) (balancer.State, error) {
	out := b.f.isOut(b.i)
	return balancer.State{Known: true, Self: balancer.ServerStatus{Backend: "fleet", Server: fmt.Sprintf("node%d", b.i),
		Status: map[bool]string{true: "DRAIN", false: "UP"}[out], Drained: out, Weight: 100, InitialWeight: 100}}, nil
}

// engine is member i's stand-in engine as its restarter and ready check
// see it.
type engine struct {
	f *fleet
	i int
}

func (e engine) Restart(context.Context) error {
	f := e.f
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &f.nodes[e.i]
	now := time.Now()
	n.engine, n.startID, n.startedAt, n.readyAt = loading, n.startID+1, now, now.Add(f.p.restartFor)
	n.hungAt = time.Time{}
	f.observe(now, fmt.Sprintf("node%d restarted", e.i))
	return nil
}

func (e engine) Status(context.Context) (restarter.EngineStatus, error) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	n := e.f.nodes[e.i]
	return restarter.EngineStatus{Known: true, StartedAt: n.startedAt, StartID: fmt.Sprint(n.startID)}, nil
}

func (e engine) String() string { return fmt.Sprintf("stand-in engine node%d", e.i) }

func (e engine) ready(context.Context) error {
	switch e.f.engineOf(e.i) {
	case hung:
		return recoverer.Stuck(errors.New("probe outstanding"))
	case loading:
		return errors.New("loading")
	}
	return nil
}

// member is one vigil's recovery and pool parts: its coordinator client,
// its directory registration and watch, and its recovery sequence.
type member struct {
	i     int
	f     *fleet
	store *state.Store
	proxy *cutProxy
	// The current vigil run; a restarted vigil replaces them.
	mu      sync.Mutex
	sem     *coord.Semaphore
	rec     *recoverer.Recovery
	cancel  context.CancelFunc
	runCtx  context.Context
	done    sync.WaitGroup
	dir     coord.Directory
	running bool
}

func (m *member) name() string { return fmt.Sprintf("node%d", m.i) }

var quiet = func() *logrus.Entry { l := logrus.New(); l.Out = io.Discard; return logrus.NewEntry(l) }()

// start runs a vigil for m against etcd: it registers, follows the
// directory and resumes any recovery its journal holds.
func (m *member) start(endpoint string) error {
	p := m.f.p
	if m.proxy != nil {
		endpoint = m.proxy.URL()
	}
	sem, err := coord.New(coord.Options{Endpoints: []string{endpoint}, Prefix: p.prefix, LeaseTTL: p.leaseTTL,
		Max: p.max, Timeout: 2 * time.Second, Node: m.name()})
	if err != nil {
		return err
	}
	lbCfg := configs.LoadBalancer{Kind: "haproxy", DrainTimeoutHung: 200 * time.Millisecond, RampWeights: []int{100}}
	rsCfg := configs.Restart{Kind: "docker", Budget: 1000, BudgetWindow: time.Hour, ReadyTimeout: time.Minute}
	eng := engine{m.f, m.i}
	rec, err := recoverer.New(recoverer.Options{
		LoadBalancer: lbCfg, Restart: rsCfg,
		Drainer: lb{m.f, m.i}, Restarter: eng, Ready: eng.ready, Store: m.store,
		Coordinator: m.f.coordinator(sem, m), TurnWait: time.Minute,
		Floor: func(context.Context) error {
			return coord.CheckFloor(m.f.peers(m.i, m.directory()), p.minServing)
		},
		Log: quiet, DrainPoll: 50 * time.Millisecond, ReadyPoll: 100 * time.Millisecond,
		RetryMin: 500 * time.Millisecond, RetryMax: 2 * time.Second, RestartSettle: time.Second,
	})
	if err != nil {
		sem.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.sem, m.rec, m.cancel, m.runCtx, m.running = sem, rec, cancel, ctx, true
	m.mu.Unlock()
	url := fmt.Sprintf("http://%s.fleet.invalid/status", m.name())
	m.done.Go(func() { sem.Register(ctx, url, nil) })
	m.done.Go(func() {
		sem.WatchMembers(ctx, func(regs []coord.Registered, err error) {
			if err == nil {
				m.dir.Set(regs)
			}
		})
	})
	return rec.Resume(ctx)
}

func (m *member) directory() []coord.Registered { return m.dir.Registered() }

// stop ends this vigil run as a SIGTERM would: the sequence stops where it
// is (its journal keeps the step and the turn), the registration is
// revoked.
func (m *member) stop() {
	m.mu.Lock()
	cancel, rec, sem := m.cancel, m.rec, m.sem
	m.running = false
	m.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	rec.Wait()
	m.done.Wait()
	sem.Close()
}

// poke is the watchdog's verdict for this interval: hung engines ask for
// a recovery (which does nothing while one runs or waits its backoff).
func (m *member) poke() {
	m.mu.Lock()
	rec, ctx, running := m.rec, m.runCtx, m.running
	m.mu.Unlock()
	m.f.mu.Lock()
	n := m.f.nodes[m.i]
	m.f.mu.Unlock()
	if !running || n.engine != hung {
		return
	}
	id := fmt.Sprintf("%s-%d", m.name(), n.hangs)
	now := time.Now()
	inc := watchdog.Incident{ID: id, Opened: now, State: watchdog.StateHung, Peak: watchdog.StateHung, Changed: now}
	rec.Recover(ctx, inc, watchdog.Verdict{State: watchdog.StateHung, Reason: "stand-in: hung", At: now})
}
