package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/pool"
	"github.com/vigil-dev/vigil/pool/coord"
)

// The pool's members with etcd coordination: this vigil registers its own
// /status URL under the key prefix and follows everyone's registrations.
// The peers it reads are pool.peers plus every registered member but
// itself: a peer listed by hand is read whether it registers or not (an
// old vigil, one whose etcd is cut off: it shows up unreachable instead of
// vanishing), and members that come and go need no edit of every config.

// poolMembers is the directory as last read from etcd, with the members
// whose registration vanished (coord.Directory).
type poolMembers struct {
	dir coord.Directory
	// registering is closed once Register has returned (its lease
	// revoked); nil when this vigil does not register.
	registering chan struct{}
}

func (p *poolMembers) set(regs []coord.Registered) { p.dir.Set(regs) }

func (p *poolMembers) get() []coord.Registered { return p.dir.Registered() }

// hasPool reports whether this vigil has peers to read: listed, or found
// in etcd.
func hasPool(cfg *configs.Config) bool {
	return len(cfg.Pool.Peers) > 0 || cfg.Pool.Coordination == "etcd"
}

// peerTarget is one /status to read and, for a registered member, the
// node it registered as.
type peerTarget struct {
	url, node string
}

// poolTargets is the union of pool.peers and the registered members other
// than this vigil, each URL once (a listed peer that also registered is
// checked against its registered name).
func poolTargets(cfg *configs.Config, regs []coord.Registered) []peerTarget {
	self := cfg.PoolStatusURL()
	var out []peerTarget
	index := map[string]int{}
	for _, u := range cfg.Pool.Peers {
		if _, dup := index[u]; dup {
			continue
		}
		index[u] = len(out)
		out = append(out, peerTarget{url: u})
	}
	for _, r := range regs {
		if r.Node == cfg.Node || r.URL == self {
			continue
		}
		if i, listed := index[r.URL]; listed {
			out[i].node = r.Node
			continue
		}
		index[r.URL] = len(out)
		out = append(out, peerTarget{url: r.URL, node: r.Node})
	}
	return out
}

// fetchPeers reads every peer's /status now. A registered member is named
// by its registration while it cannot be read, and a document naming
// another node is an error: a URL registered as "node2" that answers as
// "node1" (e.g. a loopback URL read from another host) must not count as
// node2 serving.
func (d *daemon) fetchPeers(ctx context.Context, cfg *configs.Config) []pool.Member {
	return fetchPeers(ctx, cfg, d.members.get())
}

// fetchPeers reads the /status of pool.peers and of the registered
// members regs (see poolTargets).
func fetchPeers(ctx context.Context, cfg *configs.Config, regs []coord.Registered) []pool.Member {
	targets := poolTargets(cfg, regs)
	urls := make([]string, len(targets))
	for i, t := range targets {
		urls[i] = t.url
	}
	members := pool.Fetch(ctx, urls, cfg.Pool.Timeout)
	for i, t := range targets {
		m := &members[i]
		if t.node == "" {
			continue
		}
		if !m.Reachable() {
			m.Node = t.node
			continue
		}
		if m.Node != t.node {
			m.Err = fmt.Sprintf("%s answers as %q but registered as %q in etcd", t.url, m.Node, t.node)
			m.Node, m.State, m.Drained = t.node, "", false
		}
	}
	return members
}

// startPoolMembers registers this vigil and follows the directory, under
// the supervisor, when the pool coordinates through etcd.
func (d *daemon) startPoolMembers(sup *supervisor, cfg *configs.Config) {
	if d.turns == nil {
		return
	}
	log := d.log.WithField("part", "pool")
	sup.Go("pool members", untilStopped, func(ctx context.Context) error {
		d.turns.WatchMembers(ctx, func(regs []coord.Registered, err error) {
			if err != nil {
				log.WithError(err).Warn("cannot read the pool's members from etcd; the pool view keeps the last ones seen")
				return
			}
			if changed(d.members.get(), regs) {
				log.WithField("members", describeRegs(regs)).Info("pool members registered in etcd")
			}
			d.members.set(regs)
		})
		return nil
	})
	if !cfg.Pool.Register {
		return
	}
	url := cfg.PoolStatusURL()
	done := make(chan struct{})
	d.members.registering = done
	sup.Go("pool registration", untilStopped, func(ctx context.Context) error {
		defer close(done)
		d.turns.Register(ctx, url, func(err error) {
			if err != nil {
				log.WithError(err).Warn("not registered in the pool's etcd directory; peers that rely on it do not see this vigil (trying again)")
				return
			}
			log.WithField("status_url", url).Info("registered in the pool's etcd directory")
		})
		return nil
	})
}

// closePool waits for the registration to be revoked (so the peers drop
// this vigil at once rather than after the lease's TTL), then closes the
// etcd client. A turn still held stays journaled: the next vigil takes it
// back, or it expires with its lease.
func (d *daemon) closePool() {
	if d.turns == nil {
		return
	}
	if d.members.registering != nil {
		select {
		case <-d.members.registering:
		case <-time.After(d.config().Pool.Etcd.Timeout):
		}
	}
	_ = d.turns.Close()
}

func changed(a, b []coord.Registered) bool {
	if len(a) != len(b) {
		return true
	}
	for i := range a {
		if a[i].Node != b[i].Node || a[i].URL != b[i].URL {
			return true
		}
	}
	return false
}

func describeRegs(regs []coord.Registered) string {
	parts := make([]string, len(regs))
	for i, r := range regs {
		parts[i] = r.Node + " " + r.URL
	}
	return strings.Join(parts, ", ")
}

// ReadPool reads the pool as the running vigil would, for diagnose:
// pool.peers plus, with etcd coordination, the members registered there.
// diagnose must work while vigil itself is down (it is what one runs at
// 3 a.m.), so it asks etcd itself rather than the local vigil; the note
// says why the members are unknown when etcd cannot be read.
func ReadPool(ctx context.Context, cfg *configs.Config) ([]pool.Member, string) {
	var regs []coord.Registered
	note := ""
	if cfg.Pool.Coordination == "etcd" {
		var err error
		if regs, err = registeredMembers(ctx, cfg); err != nil {
			note = "pool: members registered in etcd unknown: " + err.Error()
		}
	}
	if len(cfg.Pool.Peers) == 0 && len(regs) == 0 {
		return nil, note
	}
	return fetchPeers(ctx, cfg, regs), note
}

func registeredMembers(ctx context.Context, cfg *configs.Config) ([]coord.Registered, error) {
	s, err := openCoord(cfg)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	regs, _, err := s.Members(ctx)
	return regs, err
}
