package coord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// The pool's member directory: each vigil puts its /status URL under
// Prefix+"members/"+node, bound to a lease of its own that it keeps alive,
// so the peers find it without a static list and drop it once it is gone
// (at once when it stops, within the TTL when it dies).

// ErrNameTaken is returned (to Register's report) when another live vigil
// registered this node name with another URL: two vigils share a name.
var ErrNameTaken = errors.New("node name registered by another vigil")

// Registered is one member of the directory.
type Registered struct {
	Node  string    `json:"node"`
	URL   string    `json:"url"`
	Since time.Time `json:"since"`
}

func (s *Semaphore) membersPrefix() string {
	return strings.TrimSuffix(s.opts.Prefix, "/") + "/members/"
}

// Register keeps this vigil (Options.Node) registered with statusURL until
// ctx ends, then revokes its lease so the peers drop it at once. It puts
// the registration back whenever it is lost (etcd unreachable for longer
// than the TTL, or not reachable at the start). report, if set, is told
// each outcome: nil once registered, else why not; it is called again only
// when the outcome changes.
func (s *Semaphore) Register(ctx context.Context, statusURL string, report func(error)) {
	var last error
	said := false
	tell := func(err error) {
		if report != nil && (!said || (err == nil) != (last == nil) || err != nil && err.Error() != last.Error()) {
			report(err)
		}
		said, last = true, err
	}
	retry := min(s.opts.LeaseTTL/2, 2*time.Second)
	for ctx.Err() == nil {
		sess, err := s.register(ctx, statusURL)
		if err != nil {
			if ctx.Err() == nil {
				tell(err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		tell(nil)
		select {
		case <-ctx.Done():
			sess.Orphan()
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
			_, _ = s.client.Revoke(tctx, sess.Lease()) // else it expires with the TTL
			cancel()
			return
		case <-sess.Done():
			tell(s.unavailable("registration lost", errors.New("its lease was not renewed within its TTL")))
		}
	}
}

// register puts the member key bound to a new lease kept alive by the
// returned session. A key left by an earlier run of this vigil (same
// node, same URL, its lease not yet expired) is taken over; one of
// another vigil is not.
func (s *Semaphore) register(ctx context.Context, statusURL string) (*concurrency.Session, error) {
	key := s.membersPrefix() + s.opts.Node
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	lease, err := s.client.Grant(tctx, s.ttlSeconds())
	cancel()
	if err != nil {
		return nil, s.unavailable("grant a lease to register "+key, err)
	}
	ok := false
	defer func() {
		if !ok {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Timeout)
			_, _ = s.client.Revoke(tctx, lease.ID)
			cancel()
		}
	}()
	val, _ := json.Marshal(Registered{Node: s.opts.Node, URL: statusURL, Since: time.Now()})
	put := clientv3.OpPut(key, string(val), clientv3.WithLease(lease.ID))
	tctx, cancel = context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, s.unavailable("register "+key, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) > 0 {
			var prev Registered
			if json.Unmarshal(kvs[0].Value, &prev) == nil && prev.URL != statusURL {
				return nil, fmt.Errorf("%w: %s is registered with %s, this vigil's /status is %s; give each vigil its own node name",
					ErrNameTaken, key, prev.URL, statusURL)
			}
			// This vigil's previous run: take the key over, unless it
			// changed since it was read.
			resp, err = s.client.Txn(tctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision)).Then(put).Commit()
			if err != nil {
				return nil, s.unavailable("register "+key, err)
			}
		} else {
			resp, err = s.client.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(put).Commit()
			if err != nil {
				return nil, s.unavailable("register "+key, err)
			}
		}
		if !resp.Succeeded {
			return nil, fmt.Errorf("coord: %s changed while registering; trying again", key)
		}
	}
	sess, err := concurrency.NewSession(s.client, concurrency.WithLease(lease.ID))
	if err != nil {
		return nil, s.unavailable("keep the registration's lease alive", err)
	}
	ok = true
	return sess, nil
}

// Members lists the registered members, sorted by node, and the revision
// they were read at.
func (s *Semaphore) Members(ctx context.Context) ([]Registered, int64, error) {
	tctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	resp, err := s.client.Get(tctx, s.membersPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.unavailable("list members", err)
	}
	m := map[string]Registered{}
	for _, kv := range resp.Kvs {
		if r, ok := decodeMember(kv.Value); ok {
			m[string(kv.Key)] = r
		}
	}
	return sorted(m), resp.Header.Revision, nil
}

// WatchMembers calls seen with the whole directory each time it changes,
// until ctx ends. While etcd cannot be reached it calls seen with the last
// members it knew and the error (once per outage) and keeps trying; the
// members are then as old as the error says.
func (s *Semaphore) WatchMembers(ctx context.Context, seen func([]Registered, error)) {
	retry := min(s.opts.LeaseTTL/2, 2*time.Second)
	var last []Registered
	failing := false
	for ctx.Err() == nil {
		members, rev, err := s.Members(ctx)
		if err != nil {
			if ctx.Err() == nil && !failing {
				seen(last, err)
			}
			failing = true
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			continue
		}
		failing = false
		last = members
		seen(members, nil)
		byKey := map[string]Registered{}
		for _, r := range members {
			byKey[s.membersPrefix()+r.Node] = r
		}
		last = s.follow(ctx, rev, byKey, seen)
	}
}

// follow applies the watch's events from rev+1 on to byKey, telling seen
// after each batch, until the watch ends (ctx, a lost leader, a
// compaction); the caller lists again. The periodic re-list bounds how
// long a broken watch could hide a change.
func (s *Semaphore) follow(ctx context.Context, rev int64, byKey map[string]Registered, seen func([]Registered, error)) []Registered {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := s.client.Watch(wctx, s.membersPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	relist := time.NewTimer(max(s.opts.LeaseTTL*5, time.Minute))
	defer relist.Stop()
	for {
		select {
		case <-ctx.Done():
			return sorted(byKey)
		case <-relist.C:
			return sorted(byKey)
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return sorted(byKey)
			}
			for _, ev := range wr.Events {
				k := string(ev.Kv.Key)
				if ev.Type == clientv3.EventTypeDelete {
					delete(byKey, k)
					continue
				}
				if r, ok := decodeMember(ev.Kv.Value); ok {
					byKey[k] = r
				}
			}
			if len(wr.Events) > 0 {
				seen(sorted(byKey), nil)
			}
		}
	}
}

func decodeMember(v []byte) (Registered, bool) {
	var r Registered
	if json.Unmarshal(v, &r) != nil || r.Node == "" || r.URL == "" {
		return r, false
	}
	return r, true
}

func sorted(m map[string]Registered) []Registered {
	out := make([]Registered, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Registered) int { return strings.Compare(a.Node, b.Node) })
	return out
}
