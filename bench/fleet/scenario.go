package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/state"
)

// scenario is one way the fleet fails, run against a fleet already up.
type scenario struct {
	name, what string
	proxied    bool // every member reaches etcd through its own proxy
	run        func(r *runner) error
}

// minute is the scenarios' minute, scaled down: "30% in the same minute"
// spreads the hangs over one scaled minute.
const minute = time.Second

var scenarios = []scenario{
	{name: "wave", what: "30% of the fleet hangs within one minute", run: func(r *runner) error {
		r.hangSpread(r.pick(r.p.n*3/10), minute)
		return nil
	}},
	{name: "rolling", what: "1% of the fleet hangs every minute, for 10 minutes", run: func(r *runner) error {
		for range 10 {
			r.hangSpread(r.pick(max(1, r.p.n/100)), minute)
		}
		return nil
	}},
	{name: "etcd-restart", what: "the 30% wave; etcd killed and started again (1 s down) while the turns are all held", run: func(r *runner) error {
		go r.hangSpread(r.pick(r.p.n*3/10), minute)
		if err := r.waitOut(r.p.max, 30*time.Second); err != nil {
			return err
		}
		return r.etcd.Restart(time.Second)
	}},
	{name: "partition", what: "the 30% wave; the members holding the turns lose etcd (their proxy cut) for 3 lease TTLs", proxied: true, run: func(r *runner) error {
		go r.hangSpread(r.pick(r.p.n*3/10), minute)
		if err := r.waitOut(r.p.max, 30*time.Second); err != nil {
			return err
		}
		cut := r.f.outNodes()
		for _, i := range cut {
			r.members[i].proxy.Cut()
		}
		time.Sleep(3 * r.p.leaseTTL)
		for _, i := range cut {
			r.members[i].proxy.Heal()
		}
		return nil
	}},
	{name: "vigil-restart", what: "the 30% wave; the vigils holding the turns restarted mid-turn (300 ms down)", run: func(r *runner) error {
		go r.hangSpread(r.pick(r.p.n*3/10), minute)
		if err := r.waitOut(r.p.max, 30*time.Second); err != nil {
			return err
		}
		var wg sync.WaitGroup
		for _, i := range r.f.outNodes() {
			m := r.members[i]
			wg.Go(func() {
				m.stop()
				time.Sleep(300 * time.Millisecond)
				if err := m.start(r.etcd.Endpoint); err != nil {
					r.errf("restart %s: %v", m.name(), err)
				}
			})
		}
		wg.Wait()
		return nil
	}},
}

func scenarioNames() []string {
	var out []string
	for _, s := range scenarios {
		out = append(out, s.name)
	}
	return out
}

// runner runs one scenario on one fleet.
type runner struct {
	p       params
	f       *fleet
	members []*member
	etcd    *testinfra.Etcd
	rng     *rand.Rand
	// stderr, if set, is told every 5 s of a slow return who holds and
	// who waits, and where the members out of rotation are.
	stderr io.Writer
	mu     sync.Mutex
	errs   []string
}

func (r *runner) errf(format string, a ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

// pick chooses k members whose engines serve now.
func (r *runner) pick(k int) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.f.mu.Lock()
	var ok []int
	for i, n := range r.f.nodes {
		if n.engine == serving && !n.out {
			ok = append(ok, i)
		}
	}
	r.f.mu.Unlock()
	r.rng.Shuffle(len(ok), func(a, b int) { ok[a], ok[b] = ok[b], ok[a] })
	return ok[:min(k, len(ok))]
}

// hangSpread hangs the members at random instants within d, and returns
// after d.
func (r *runner) hangSpread(members []int, d time.Duration) {
	start := time.Now()
	r.mu.Lock()
	at := make([]time.Duration, len(members))
	for i := range at {
		at[i] = time.Duration(r.rng.Int64N(int64(d)))
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for k, i := range members {
		wg.Go(func() {
			time.Sleep(time.Until(start.Add(at[k])))
			r.f.hang(i)
		})
	}
	wg.Wait()
	time.Sleep(time.Until(start.Add(d)))
}

// waitOut waits until k members are out of rotation.
func (r *runner) waitOut(k int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for len(r.f.outNodes()) < k {
		if time.Now().After(deadline) {
			return fmt.Errorf("never %d members out of rotation within %s (%d are)", k, within, len(r.f.outNodes()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// result is one scenario's figures on one fleet.
type result struct {
	scenario string
	p        params
	obs      observer
	// allServing is from the first hang until every member serves again
	// (0 if some never did within the run's limit).
	allServing time.Duration
	reqPerSec  float64
	maxLeases  int
	stuck      []string
	errs       []string
	wall       time.Duration
	// directory is how long the fleet's vigils took, from their start,
	// until each saw every member registered.
	directory time.Duration
}

// runScenario starts the fleet's vigils against etcd, runs sc, and waits
// until every member serves again (or within).
func runScenario(ctx context.Context, p params, sc scenario, etcd *testinfra.Etcd, seed uint64, within time.Duration, stderr io.Writer) (result, error) {
	p.proxied = sc.proxied
	p.prefix = fmt.Sprintf("/vigil/fleet-%s-%d-%d/", sc.name, p.n, time.Now().UnixNano())
	f := newFleet(p)
	r := &runner{p: p, f: f, etcd: etcd, rng: rand.New(rand.NewPCG(seed, uint64(p.n))), stderr: stderr}
	defer func() {
		var wg sync.WaitGroup
		for _, m := range r.members {
			wg.Go(m.stop)
		}
		wg.Wait()
		for _, m := range r.members {
			if m.proxy != nil {
				m.proxy.Close()
			}
		}
	}()
	for i := range p.n {
		m := &member{i: i, f: f, store: state.Memory()}
		if p.proxied {
			px, err := newCutProxy(etcd.Endpoint)
			if err != nil {
				return result{}, err
			}
			m.proxy = px
		}
		r.members = append(r.members, m)
		if err := m.start(etcd.Endpoint); err != nil {
			return result{}, fmt.Errorf("start %s: %w", m.name(), err)
		}
	}
	// Every vigil sees the whole directory before anything hangs.
	started := time.Now()
	deadline := started.Add(3 * time.Minute)
	for _, m := range r.members {
		for len(m.directory()) < p.n {
			if ctx.Err() != nil {
				return result{}, ctx.Err()
			}
			if time.Now().After(deadline) {
				return result{}, fmt.Errorf("%s sees %d of %d members after 3m", m.name(), len(m.directory()), p.n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	converged := time.Since(started)
	load, err := newEtcdLoad(etcd.Endpoint)
	if err != nil {
		return result{}, err
	}
	defer load.Close()

	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() { stopBG(); bgWG.Wait() }()
	// The engines load on time, and each vigil's watchdog asks for a
	// recovery every poll while its engine is hung.
	bgWG.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
			}
			f.tick()
			if time.Since(last) >= p.poll {
				last = time.Now()
				for _, m := range r.members {
					m.poke()
				}
			}
		}
	})
	var reqBase, reqLast, reqFirst float64
	var maxLeases int
	sample := func() {
		if v, err := load.requests(); err == nil {
			if v < reqLast { // etcd restarted: its counters began again
				reqBase += reqLast
			}
			reqLast = v
		}
		if n, err := load.leases(bg); err == nil {
			maxLeases = max(maxLeases, n)
		}
	}
	sample()
	reqFirst = reqBase + reqLast
	bgWG.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				sample()
			}
		}
	})

	start := time.Now()
	f.mu.Lock()
	f.obs = observer{start: start, minServing: p.n, bucket: time.Second}
	f.mu.Unlock()
	if err := sc.run(r); err != nil {
		r.errf("%v", err)
	}
	end := time.Now().Add(within)
	lastSaid := time.Now()
	for !f.allServing() && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		if r.stderr != nil && time.Since(lastSaid) > 5*time.Second {
			lastSaid = time.Now()
			r.describe(ctx, start)
		}
	}
	stopBG()
	bgWG.Wait()
	wall := time.Since(start)
	res := result{scenario: sc.name, p: p, wall: wall, maxLeases: maxLeases, errs: r.errs, directory: converged}
	f.mu.Lock()
	res.obs = f.obs
	res.obs.series = append([]bucketFig(nil), f.obs.series...)
	for i, n := range f.nodes {
		if n.out || n.engine != serving {
			res.stuck = append(res.stuck, fmt.Sprintf("node%d %s out=%t", i, n.engine, n.out))
		}
	}
	f.mu.Unlock()
	if len(res.stuck) == 0 && !res.obs.lastRecovered.IsZero() {
		res.allServing = res.obs.lastRecovered.Sub(start)
	}
	res.reqPerSec = (reqBase + reqLast - reqFirst) / wall.Seconds()
	return res, ctx.Err()
}

// describe says who holds a turn and who waits in etcd, and the recovery
// step of each member out of rotation or hung: a node stuck without a
// turn shows here.
func (r *runner) describe(ctx context.Context, start time.Time) {
	var q coord.TurnQueue
	var err error
	for _, m := range r.members {
		m.mu.Lock()
		sem := m.sem
		m.mu.Unlock()
		if sem != nil {
			q, err = sem.Queue(ctx)
			break
		}
	}
	names := func(hs []coord.Holder) string {
		var out []string
		for _, h := range hs {
			out = append(out, h.Node)
		}
		return strings.Join(out, " ")
	}
	fmt.Fprintf(r.stderr, "  at %s: holding [%s] waiting %d [%s] (err %v)\n", time.Since(start).Round(time.Second),
		names(q.Holding), len(q.Waiting), names(q.Waiting), err)
	r.f.mu.Lock()
	nodes := append([]node(nil), r.f.nodes...)
	r.f.mu.Unlock()
	var lines []string
	for i, n := range nodes {
		if !n.out && n.engine == serving {
			continue
		}
		m := r.members[i]
		m.mu.Lock()
		rec := m.rec
		m.mu.Unlock()
		snap := rec.Snapshot()
		lines = append(lines, fmt.Sprintf("node%d %s out=%t step=%s active=%t err=%q", i, n.engine, n.out, snap.Step, snap.Active, snap.LastError))
	}
	if len(lines) > 8 {
		lines = append(lines[:8], fmt.Sprintf("... %d more", len(lines)-8))
	}
	for _, l := range lines {
		fmt.Fprintf(r.stderr, "    %s\n", l)
	}
}
