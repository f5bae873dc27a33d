package daemon

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/admission"
	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/pool/coord"
	"github.com/vigil-dev/vigil/recoverer"
	"github.com/vigil-dev/vigil/watchdog"
)

// poolCache holds the last view of the peers. /status serves the cache,
// never a live fetch: two vigils that each fetched the other's /status
// while answering their own would chase each other forever.
type poolCache struct {
	mu      sync.Mutex
	members []pool.Member
	at      time.Time
	// turns is the queue for the pool's turns (pool.coordination: etcd),
	// nil when there is none or etcd did not answer the last read.
	turns *coord.TurnQueue
}

// refreshPool keeps the cache fresh every interval until ctx ends.
func (d *daemon) refreshPool(ctx context.Context) {
	cfg := d.config()
	t := time.NewTicker(cfg.Watchdog.Interval)
	defer t.Stop()
	for {
		members := d.fetchPeers(ctx, cfg)
		var turns *coord.TurnQueue
		if d.turns != nil {
			if q, err := d.turns.Queue(ctx); err == nil {
				turns = &q
			}
		}
		d.pool.mu.Lock()
		d.pool.members, d.pool.at, d.pool.turns = members, time.Now(), turns
		d.pool.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *daemon) poolView() []pool.Member {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return append([]pool.Member(nil), d.pool.members...)
}

// turnQueue is the last read of the pool's turns (nil if none).
func (d *daemon) turnQueue() *coord.TurnQueue {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return d.pool.turns
}

// movePeers are the pool members a call cut from this vigil's lost engine
// may move to: read lately, serving (healthy), in rotation, with a
// limiter reachable from here; the least loaded first.
func (d *daemon) movePeers() []admission.Peer {
	var ps []admission.Peer
	members := d.poolView()
	slices.SortStableFunc(members, func(a, b pool.Member) int {
		return cmp.Compare(a.Waiting+a.Running, b.Waiting+b.Running)
	})
	for _, m := range members {
		if m.Reachable() && !m.Drained && m.ProxyURL != "" && m.State == string(watchdog.StateHealthy) {
			ps = append(ps, admission.Peer{Node: m.Node, URL: m.ProxyURL})
		}
	}
	return ps
}

// poolLine is the one-line pool view for pages ("" without peers).
func (d *daemon) poolLine() string {
	cfg := d.config()
	if !hasPool(cfg) {
		return ""
	}
	v, _ := d.watchdog.Current()
	self := pool.Member{Node: cfg.Node, State: string(v.State), Waiting: v.Evidence.Waiting, Running: v.Evidence.Running}
	return pool.Summarize(self, d.poolView())
}

// peerDrained is the recovery guard's view of the pool: a fresh fetch,
// since draining on stale news is what the guard exists to prevent.
func (d *daemon) peerDrained(ctx context.Context) (string, bool) {
	cfg := d.config()
	if !hasPool(cfg) {
		return "", false
	}
	return pool.AnotherDrained(d.fetchPeers(ctx, cfg))
}

// watchAffinity judges every interval whether keyed retries find their
// execution here, and pages once when they mostly do not (the load
// balancer is not key-affine) and once when that is over.
func (d *daemon) watchAffinity(ctx context.Context) {
	t := time.NewTicker(d.config().Watchdog.Interval)
	defer t.Stop()
	for {
		s := d.limiter.Stats()
		if _, page := d.affinity.Observe(time.Now(), s.KeyedRetries, s.KeyedRetriesFound); page != "" {
			d.notice("routing", page)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wirePool gives the recovery the pool's coordination: turns through etcd
// (pool.coordination: etcd) and the min_serving floor over the peers'
// /status (listed and registered), fetched fresh for each decision.
func (d *daemon) wirePool(cfg *configs.Config, ro *recoverer.Options) error {
	p := cfg.Pool
	if p.MinServing > 0 {
		minServing := p.MinServing
		ro.Floor = func(ctx context.Context) error {
			return coord.CheckFloor(d.fetchPeers(ctx, cfg), minServing)
		}
	}
	if p.Coordination != "etcd" {
		return nil
	}
	var err error
	if d.turns, err = openCoord(cfg); err != nil {
		return err
	}
	// A granted turn also counts the peers drained by their vigil: one cut
	// off from etcd mid-recovery has lost its place there but not left
	// its drain (docs/design.md, the pool at scale).
	ro.Coordinator = coord.TurnsWith(d.turns, coord.TurnOptions{Drained: func(ctx context.Context) []string {
		return drainedPeers(ctx, cfg, &d.members.dir)
	}})
	ro.DrainWithoutCoordinator = p.DrainWithoutCoordinator
	return nil
}

// openCoord connects to the pool's etcd (pool.etcd).
func openCoord(cfg *configs.Config) (*coord.Semaphore, error) {
	p := cfg.Pool
	tlsCfg, err := coord.TLSFromFiles(p.Etcd.CAFile, p.Etcd.CertFile, p.Etcd.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("pool.etcd: %w", err)
	}
	s, err := coord.New(coord.Options{
		Endpoints: p.Etcd.Endpoints, TLS: tlsCfg, Prefix: p.Etcd.KeyPrefix, LeaseTTL: p.Etcd.LeaseTTL,
		Max: p.MaxConcurrentRecoveries, Timeout: p.Etcd.Timeout, Node: cfg.Node,
	})
	if err != nil {
		return nil, fmt.Errorf("pool.etcd: %w", err)
	}
	return s, nil
}

// drainedPeers reads the /status of the registered members and of those
// whose registration vanished, and names the ones drained by their vigil.
// A vanished member that is not drained (or cannot be read) is forgotten.
func drainedPeers(ctx context.Context, cfg *configs.Config, dir *coord.Directory) []string {
	gone := map[string]bool{}
	regs := dir.Registered()
	for _, r := range dir.Gone() {
		gone[r.Node] = true
		regs = append(regs, r)
	}
	var out []string
	for _, m := range fetchPeers(ctx, cfg, regs) {
		switch {
		case m.Reachable() && m.Drained:
			out = append(out, m.Node)
		case gone[m.Node]:
			dir.Forget(m.Node)
		}
	}
	return out
}
