package main

import (
	"context"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/pool"
)

// poolCache holds the last view of the peers. /status serves the cache,
// never a live fetch: two vigils that each fetched the other's /status
// while answering their own would chase each other forever.
type poolCache struct {
	mu      sync.Mutex
	members []pool.Member
	at      time.Time
}

// refreshPool keeps the cache fresh every interval until ctx ends.
func (d *daemon) refreshPool(ctx context.Context) {
	cfg := d.config()
	if len(cfg.Pool.Peers) == 0 {
		return
	}
	t := time.NewTicker(cfg.Watchdog.Interval)
	defer t.Stop()
	for {
		members := pool.Fetch(ctx, cfg.Pool.Peers, cfg.Pool.Timeout)
		d.pool.mu.Lock()
		d.pool.members, d.pool.at = members, time.Now()
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

// poolLine is the one-line pool view for pages ("" without peers).
func (d *daemon) poolLine() string {
	cfg := d.config()
	if len(cfg.Pool.Peers) == 0 {
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
	if len(cfg.Pool.Peers) == 0 {
		return "", false
	}
	return pool.AnotherDrained(pool.Fetch(ctx, cfg.Pool.Peers, cfg.Pool.Timeout))
}

// watchAffinity judges every interval whether keyed retries find their
// execution here, and pages once when they mostly do not (the load
// balancer is not key-affine) and once when that is over.
func (d *daemon) watchAffinity(ctx context.Context) {
	if d.affinity == nil {
		return
	}
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
